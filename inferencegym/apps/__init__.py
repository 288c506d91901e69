"""The outward faces, each wiring the layers below together:

- :mod:`~inferencegym.apps.env_server`: the OpenEnv-compatible environment server (HTTP + WebSocket, /web);
- :mod:`~inferencegym.apps.policy_endpoint`: the Ray Serve policy endpoint (``/act``) and its client;
- :mod:`~inferencegym.apps.replay`: replaying a workload against a real OpenAI-compatible endpoint;
- :mod:`~inferencegym.apps.tuning`: Tune sweeps over reward shaping, logged to MLflow.

The Ray Serve entry for ``serve run serve/config.yaml`` is ``inferencegym.apps.policy_endpoint.app:build_app``.
"""
