"""Array programs (``jax.numpy`` or numpy code) in and out of the IR.

* `jnp`: a ``jax.numpy``-compatible namespace over PyTorch, so a program runs as written.
* `load_program(path)`: a program file, run with ``jax.numpy``/``numpy`` bound to `jnp`.
* `import_program(fn, inputs)`: the program as a `rewrite.Graph` (through ``torch.export``);
  what cannot be imported is an `ArrayProgramError` naming the construct.
* `optimize(fn, inputs)`: the program rewritten by the verified search and handed back compiled
  by ``torch.compile`` (a `RewrittenProgram`: call it like the program).
"""

from __future__ import annotations

from rewrite.arrays.namespace import SUPPORTED, jnp
from rewrite.arrays.program import ArrayProgram, import_program, load_program, program_inputs
from rewrite.arrays.rewritten import RewrittenProgram, optimize

__all__ = [
    "SUPPORTED",
    "ArrayProgram",
    "RewrittenProgram",
    "import_program",
    "jnp",
    "load_program",
    "optimize",
    "program_inputs",
]
