"""Ray Serve policy endpoint: serve a trained policy over HTTP and query it from the envs.

- :mod:`inferencegym.serving.policy` - a batched, greedy policy over an RLModule checkpoint, and the
  conversion of JSON observations to the arrays of the module's observation space.
- :mod:`inferencegym.serving.schemas` - the pydantic bodies of ``POST /act``.
- :mod:`inferencegym.serving.app` - the Serve deployment (``/act``, ``/healthz``, ``/metadata``) and
  :func:`~inferencegym.serving.app.build_app` for ``serve run``.
- :mod:`inferencegym.serving.client` - :class:`~inferencegym.serving.client.HTTPPolicy`, the policy the
  registry returns for ``http://...`` specs (closed-loop evaluation of a served policy).

Heavy libraries (torch, Ray) are imported by the submodules that need them, not here.
"""
