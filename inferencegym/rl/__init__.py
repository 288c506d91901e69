"""RL training on Ray: RLlib modules, YAML configs, callbacks, BC warm start, Tune training,
policy loading and reports. Heavy imports (Ray, torch) happen in the submodules."""
