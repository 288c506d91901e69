"""Evaluation: running policies on tasks over seeds, with the rows ``inferencegym evaluate`` prints.

``evaluate_policy`` (single-agent tasks) and ``evaluate_cluster_policy`` (cluster tasks) share the
row shape of :class:`EvaluationResult`; seeds S, S+1, ... (evaluation seeds start at 1000).
"""

from inferencegym.evaluation.single import EvaluationResult, evaluate_policy
from inferencegym.evaluation.cluster import evaluate_cluster_policy

__all__ = ["EvaluationResult", "evaluate_policy", "evaluate_cluster_policy"]
