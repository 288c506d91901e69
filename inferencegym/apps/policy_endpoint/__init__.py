"""Ray Serve policy endpoint: serve a trained policy over HTTP and query it from the envs.

- :mod:`inferencegym.apps.policy_endpoint.policy` - a batched, greedy policy over an RLModule checkpoint, and the
  conversion of JSON observations to the arrays of the module's observation space.
- :mod:`inferencegym.apps.policy_endpoint.schemas` - the pydantic bodies of ``POST /act``.
- :mod:`inferencegym.apps.policy_endpoint.app` - the Serve deployment (``/act``, ``/healthz``, ``/metadata``) and
  :func:`~inferencegym.apps.policy_endpoint.app.build_app` for ``serve run``.
- :mod:`inferencegym.apps.policy_endpoint.client` - :class:`~inferencegym.apps.policy_endpoint.client.HTTPPolicy`, the policy the
  registry returns for ``http://...`` specs (closed-loop evaluation of a served policy).

Heavy libraries (torch, Ray) are imported by the submodules that need them, not here.
"""

from inferencegym.apps.policy_endpoint.client import HTTPPolicy
from inferencegym.evaluation.control import register_control_scheme
from inferencegym.policies import register_scheme

register_scheme("http://", HTTPPolicy)
register_scheme("https://", HTTPPolicy)


def _http_control(spec: str, task_id: str):
    """A served control-plane policy (``inferencegym serve --policy pretrained:cluster_autoscaling``) as
    the autoscaler / admission controller of ``evaluate --task cluster_autoscaling --policy http://...``."""
    from inferencegym.rl.control import wrap_control_policy  # lazy: torch

    return wrap_control_policy(HTTPPolicy(spec, task_id), task_id, name=spec)


register_control_scheme("http://", _http_control)
register_control_scheme("https://", _http_control)
