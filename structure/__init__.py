"""Structure learning from search logs and the structured (GP-network) surrogate."""

from __future__ import annotations

from structure.config import StructuredConfig
from structure.dag import FORMAT_VERSION, TIERS, Edge, Formula, Knowledge, Structure
from structure.errors import (
    KnowledgeError,
    StructureError,
    StructureFormatError,
    StructureLearningError,
)
from structure.features import Feature, FeatureConfig, FeatureMap, fit_features
from structure.learn import LearnConfig, learn_structure
from structure.network import GPNetwork, NetworkConfig, fit_gp_network
from structure.plot import draw_fit, draw_structure, explain
from structure.surrogate import StructuredSurrogate

__all__ = [
    "FORMAT_VERSION",
    "TIERS",
    "Edge",
    "Feature",
    "FeatureConfig",
    "FeatureMap",
    "Formula",
    "GPNetwork",
    "Knowledge",
    "KnowledgeError",
    "LearnConfig",
    "NetworkConfig",
    "Structure",
    "StructureError",
    "StructureFormatError",
    "StructureLearningError",
    "StructuredConfig",
    "StructuredSurrogate",
    "draw_fit",
    "draw_structure",
    "explain",
    "fit_features",
    "fit_gp_network",
    "learn_structure",
]
