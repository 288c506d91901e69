"""Entry for ``serve run serve.app:app`` from the repository root (``serve/config.yaml`` is the
config-file form and calls :func:`inferencegym.apps.policy_endpoint.app.build_app` directly).

The policy comes from ``INFERENCEGYM_POLICY`` (``checkpoint:PATH`` or ``pretrained:TASK``; default
``pretrained:bursty_workload``) and the optional task from ``INFERENCEGYM_TASK``. Binding the
application loads nothing: the checkpoint is loaded once, in the Serve replica.
"""

from __future__ import annotations

import os

from inferencegym.apps.policy_endpoint.app import build_app

app = build_app({"policy": os.environ.get("INFERENCEGYM_POLICY", "pretrained:bursty_workload"),
                 "task_id": os.environ.get("INFERENCEGYM_TASK") or None})
