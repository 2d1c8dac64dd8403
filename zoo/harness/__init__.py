"""The comparison harness: cells, evaluation views, statistics, report, plots.

    python -m zoo.compare --config configs/compare/demo.py --workdir DIR

One module per concern: `cells` (pre-training a grid's cells, resumable),
`minimal_pairs`, `probe` and `few_shot` (the three evaluation views),
`baselines` (the non-neural floor), `compressed` (distilled, quantised
and pruned rows, and what each costs to store and run), `statistics`
(bootstrap intervals, paired differences, rank correlation), `report`
(tables) and `plots`.
"""
