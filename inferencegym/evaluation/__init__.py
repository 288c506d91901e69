"""Evaluation: running policies on tasks over seeds, with the rows ``inferencegym evaluate`` prints.

``evaluate_policy`` (single-agent tasks) and ``evaluate_cluster_policy`` (cluster tasks) share the
row shape of :class:`EvaluationResult`; seeds S, S+1, ... (evaluation seeds start at 1000). The
cluster one is imported from :mod:`inferencegym.evaluation.cluster` (it runs ``ClusterEnv``, which
imports RLlib: ~5 s that single-agent evaluation should not pay).
"""

from inferencegym.evaluation.single import EvaluationResult, evaluate_policy

__all__ = ["EvaluationResult", "evaluate_policy"]
