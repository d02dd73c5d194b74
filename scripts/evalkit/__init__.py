"""Shared code of the recall and directive evaluations (scripts/eval_recall.py, eval_directives.py,
make_eval_set.py): the generated roleplay set, the metrics, the baselines and the sidecar driver."""
