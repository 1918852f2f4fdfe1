"""The bug zoo: speculative samplers and engines with one real bug each (`specverify audit mutant:<name>`).

Every mutant is the exact implementation (`reference.vector.VectorSampler` for samplers,
`reference.toy_engine.SpecEngine` for engines) with one primitive overridden; its docstring names the
engine bug it models and where that bug was seen. The audit must fail every one of them
(`specverify zoo` shows which checks do). One module per primitive changed:

    acceptance    the acceptance test                      greedy        the argmax and its ties
    endpoints     coins at 0 and 1, padded drafts          seeded        each request's random stream
    residual      the recovered token: residual, coin, draw
    ranks         tensor parallelism: each rank's generator, each rank's reduction order
    tail          the drafts after a rejection, the bonus row
    precision     the draw's arithmetic in float32 (far tail)
    tiles         a draw tiled over the vocabulary, its padding past V
    drafter       our engine's drafter out of sync with the committed sequence (engine level)
    engine_loop   the loop around an exact sampler (what is drafted, what the KV caches keep, which
                  rows are transformed); these declare only the "engine" capability
    processors    the sampling state around an exact sampler (penalties, min_tokens, min_p, grammar,
                  stop tokens under speculation); "engine" capability with every processor declared
    serving       our engine with a bug after its sampler (stop strings, the cap, usage, logprobs,
                  streams, seeds, preemption): "serving" capability, the server variants in process

Each mutant registers itself where it is defined (`registry.mutant`: its number, name and targets),
so adding one is one class in one module. Beside them: `lossy` (known-biased rules as engines,
`lossy:<rule>`), `run` (audit the reference and every mutant: `run_zoo`), `render` (the matrix as
text).

    MUTANTS   name -> class, in catalogue order
    TARGETS   name -> the checks meant to catch it
"""

from __future__ import annotations

from specverify.errors import InputError

from . import acceptance, endpoints, engine_loop, greedy, processors, ranks, residual, seeded, tail  # noqa: F401 (they register)
from . import precision, tiles  # noqa: F401 (they register: the draw at real vocabulary sizes)
from . import state  # noqa: F401 (they register: our engine's ring buffer and recurrent state, bitwise level)
from . import drafter  # noqa: F401 (it registers: our engine's drafter out of sync)
from . import serving  # noqa: F401 (they register: the serving path at the engine level, 45-51, 54 and 55)
from .registry import CATALOGUE

_ORDER = sorted(CATALOGUE, key=lambda name: CATALOGUE[name].number)
MUTANTS = {name: CATALOGUE[name].cls for name in _ORDER}
TARGETS = {name: CATALOGUE[name].targets for name in _ORDER}


def make(name: str):
    """`mutant:<name>` -> a fresh mutant adapter."""
    cls = MUTANTS.get(name)
    if cls is None:
        raise InputError(f"unknown mutant {name!r}; known: {', '.join(MUTANTS)}")
    adapter = cls()
    adapter.name = f"mutant:{name}"
    adapter.mutant_of = cls.__mro__[1].__name__
    return adapter
