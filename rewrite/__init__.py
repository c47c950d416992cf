"""The rewrite search being tuned: tensor-graph IR, rules, verification, cost model and search."""
