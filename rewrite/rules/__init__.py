"""Rewrite rules as data: patterns, the catalogue, and the registry with its verification gate.

Public names: `Rule`, `Site`, `Match`, `P`, `V`, `Dims` (rule definition), `FAMILIES`,
`OBJECTIVES`, `op` / `outs` (add a node in a builder or editor and get its value(s)),
`catalogue()` (built-in rules), `RuleRegistry` / `default_registry()` (verified
rules), `verify_rule` / `GateReport`, `rules_table` / `write_rules_doc` (docs).
"""

from __future__ import annotations

from rewrite.rules._helpers import op, outs
from rewrite.rules.base import FAMILIES, OBJECTIVES, Dims, Rule, Site
from rewrite.rules.docs import rules_table, write_rules_doc
from rewrite.rules.pattern import Match, P, V
from rewrite.rules.registry import (
    GateReport,
    RuleRegistry,
    catalogue,
    default_registry,
    verify_rule,
)

__all__ = [
    "FAMILIES",
    "OBJECTIVES",
    "Dims",
    "GateReport",
    "Match",
    "P",
    "Rule",
    "RuleRegistry",
    "Site",
    "V",
    "catalogue",
    "default_registry",
    "op",
    "outs",
    "rules_table",
    "verify_rule",
    "write_rules_doc",
]
