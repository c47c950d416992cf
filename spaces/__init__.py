"""Typed search spaces for the tuner, including a simplex parameter for rule priors."""

from spaces.base import Parameter
from spaces.errors import SpaceError
from spaces.params import Bool, Choice, Fixed, Float, Int, Simplex, parameter_from_dict
from spaces.space import FORMAT_VERSION, Space

__all__ = [
    "FORMAT_VERSION",
    "Bool",
    "Choice",
    "Fixed",
    "Float",
    "Int",
    "Parameter",
    "Simplex",
    "Space",
    "SpaceError",
    "parameter_from_dict",
]
