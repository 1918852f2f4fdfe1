"""An audit's checks on a Ray cluster: each adapter in an actor of its own, results merged into the rows a
local run gives.

The driver (the `specverify audit` process) keeps its own adapter handle for the engine's attributes only.
The work is a list of tasks: each group of checks that share samples (`audit.groups_of`), and each
shard of a sharded check (`rare_event`: `checks.rare_event.plan`). A pool of `AdapterActor`s -- each one
`audit.prepare`s the same engine with the same resolved settings, so its checks see the same seed and
problems -- takes the tasks one at a time as it frees up (resources per actor: --ray-cpus-per-adapter,
--ray-gpus-per-adapter). Rows come back as they are (a row's `power_fn`, which needs the audit's Holm
level, stays in its actor and is asked for by `RemotePower`); the driver then assembles them exactly
as `audit.run_audit` does a local run, in battery order, so the same seed gives the same rows.

Faults: an actor that dies (its process or node lost) fails its task with RayActorError. The task is
run again from its start on a new actor (its results were never recorded: a task's result is recorded
once, when it returns whole, keyed by the task); a second loss is an AdapterError naming the task
("rare_event seeded shard 3 of 7: ..."). Each retry is one line in the result's `errors`.

A decisive audit (`--stop decisive`) does not split: its rounds run one check after another on one
adapter, as they do locally (`--jobs` unused there too), so `run_whole` runs it whole in one adapter
actor (retried once on a new actor if that one is lost) and returns its result, rows identical to a
local decisive run's.

Where the work ran is the result's `executor` record (`where`): the executor, the actors started, and
the tasks each node ran (by node id), so a report shows what the cluster did.
"""

from __future__ import annotations

import collections
import copy
import logging
import os
import time
from dataclasses import dataclass, replace

from specverify.errors import AdapterError, InputError

from . import RAY, Executor, reachable, require_ray

MAX_TRIES = 2               # a task runs at most this often (once, then once more on a new actor)
SHARDED = "rare_event"      # the check whose shards are tasks of their own


def connect(executor: Executor) -> None:
    """ray.init for `executor` (nothing if this process is already connected): InputError if ray is not
    installed or the cluster does not answer, before any audit work."""
    require_ray()
    if executor.address is not None:
        why = reachable(executor.address)
        if why is not None:
            raise InputError(f"--executor ray:{executor.address}: no Ray cluster answers at {executor.address} "
                             f"({why}); start one with `ray start --head --port PORT` or fix the address")
    import ray

    if ray.is_initialized():
        return
    options = dict(log_to_driver=False, logging_level=logging.ERROR, configure_logging=True)
    try:
        if executor.address is None:
            ray.init(include_dashboard=False, **options)
        else:
            ray.init(address=executor.address, **options)
    except Exception as exc:         # noqa: BLE001 -- ray raises ConnectionError, RuntimeError, ValueError...
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        cause = [line.strip() for line in str(exc.__cause__ or "").splitlines() if "error" in line.lower()]
        why = first + (f" ({cause[-1][:300]})" if cause else "")
        raise InputError(f"--executor {executor}: cannot connect to the Ray cluster: {why[:600]}") from None


def _here() -> str:
    """The Ray node id of the calling actor."""
    import ray

    return ray.get_runtime_context().get_node_id()


def portable(source):
    """The engine spec an actor elsewhere can load: a `path/file.py:name` spec with an absolute path
    (actors do not run in this directory); InputError for what cannot cross (an adapter instance, a
    factory without a spec)."""
    from specverify.audit import spec_of

    if not isinstance(source, str):
        source = spec_of(source) if callable(source) else None
        if source is None:
            raise InputError("--executor ray needs an engine name or spec (an adapter instance or a factory "
                             "defined in __main__ cannot be rebuilt in an actor)")
    path, sep, name = source.rpartition(":")
    if sep and path.endswith(".py") and not os.path.isabs(path):
        return f"{os.path.abspath(path)}:{name}"
    return source


class AdapterActor:
    """One adapter and its audit context, in a Ray actor: runs groups of checks and shards."""

    def __init__(self, source, given: dict, isolated: bool):
        from specverify.audit import prepare
        from specverify.battery.state import AuditState

        audit = prepare(source, given, isolated=isolated)
        self.audit = audit
        self.engine = audit.engine
        self.ctx = replace(audit.ctx, state=AuditState(), factory=audit.factory)
        self.kept = {}              # task key -> {check: rows}, whose power_fn the driver may ask for

    def run_group(self, key, names: list):
        from specverify.audit import _Ran, run_checks

        ran = _Ran()
        run_checks(self.engine, self.ctx, names, ran)
        self.kept[key] = ran.rows
        powered = {name: [i for i, r in enumerate(rows) if r.power_fn is not None] for name, rows in ran.rows.items()}
        out = copy.copy(ran)
        out.rows = {name: [replace(r, power_fn=None) for r in rows] for name, rows in ran.rows.items()}
        return out, powered, _here()

    def run_shard(self, level: str, spec: dict):
        from specverify.checks import rare_event

        return rare_event.SHARD[level](self.engine, replace(self.ctx, check=SHARDED), spec), _here()

    def run_whole(self):
        """The whole audit here (a decisive one): its result, rows without their power functions (the
        actor's Holm has stated each row's power already), and this node's id."""
        result = self.audit.run(jobs=1)
        result.checks = [replace(r, power_fn=None) for r in result.checks]
        return result, _here()

    def power(self, key, name: str, index: int, level: float) -> float:
        return float(self.kept[key][name][index].power_fn(level))

    def state(self):
        return self.ctx.state.calls, list(self.ctx.state.changed_inputs)

    def close(self) -> None:
        self.engine.close()


@dataclass
class RemotePower:
    """A row's power_fn kept in its actor: called with the audit's level, it asks the actor."""

    actor: object
    key: object
    name: str
    index: int

    def __call__(self, level: float) -> float:
        import ray

        try:
            return ray.get(self.actor.power.remote(self.key, self.name, self.index, level))
        except Exception:            # noqa: BLE001 -- the actor is gone: the power is not known
            return float("nan")


@dataclass
class Task:
    key: tuple                      # ("group", names...) or ("shard", level, index)
    label: str                      # how a message names it
    tries: int = 0


def _tasks(engine, ctx, names: list) -> tuple:
    """(tasks, {level: shard specs}) of an audit of `names`."""
    from specverify.audit import groups_of
    from specverify.checks import rare_event

    tasks, plans = [], {}
    for group in groups_of(names):
        if group == [SHARDED]:
            for level in rare_event.levels(engine):
                specs = plans[level] = rare_event.plan(ctx, level)
                tasks += [Task(("shard", level, s["index"]), f"{SHARDED} {level} shard {s['index'] + 1} of {len(specs)}")
                          for s in specs]
        else:
            tasks.append(Task(("group",) + tuple(group), f"check{'s' if len(group) > 1 else ''} {', '.join(group)}"))
    return tasks, plans


def _actor_count(executor: Executor, tasks: int) -> int:
    import ray

    if executor.actors is not None:
        return max(1, min(executor.actors, tasks))
    have = ray.cluster_resources()
    fits = [int(have.get("CPU", 0) // executor.cpus_per_adapter)] if executor.cpus_per_adapter else []
    if executor.gpus_per_adapter:
        fits.append(int(have.get("GPU", 0) // executor.gpus_per_adapter))
    if min(fits) < 1:
        raise InputError(f"the Ray cluster has {have.get('CPU', 0):g} CPUs and {have.get('GPU', 0):g} GPUs: not enough "
                         f"for one adapter actor ({executor.cpus_per_adapter:g} CPUs, {executor.gpus_per_adapter:g} GPUs)")
    return max(1, min(min(fits), tasks))


def where(executor: Executor, actors: int, nodes: list) -> dict:
    """The result's `executor` record: {"name", "actors", "tasks", "tasks_per_node": {node id: tasks}};
    `nodes`: the node id each task's recorded result came from."""
    return {"name": str(executor), "actors": actors, "tasks": len(nodes),
            "tasks_per_node": dict(sorted(collections.Counter(nodes).items()))}


def _actor_class(executor: Executor):
    import ray

    env = {"PYTHONPATH": os.pathsep.join(p for p in [os.getcwd(), os.environ.get("PYTHONPATH", "")] if p)}
    return ray.remote(num_cpus=executor.cpus_per_adapter, num_gpus=executor.gpus_per_adapter, max_restarts=0,
                      runtime_env={"env_vars": env})(AdapterActor)


def _lost(label: str, tries: int, exc) -> str:
    """The errors line of a task whose actor was lost; AdapterError (nothing counted) at MAX_TRIES."""
    why = (str(exc).strip().splitlines() or ["actor died"])[0][:200]
    if tries >= MAX_TRIES:
        raise AdapterError(f"{label}: its adapter actor was lost {tries} times, nothing of it was counted; "
                           f"last: {why}") from None
    return f"{label}: its adapter actor was lost ({why}); run again from its start on a new actor"


def _failed(label: str, exc) -> Exception:
    """The error to raise for a task that raised in its actor: the adapter's or input's own, named."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, (AdapterError, InputError)):
        return type(cause)(f"{label}: {cause}")
    first = (str(cause or exc).strip().splitlines() or ["failed"])[-1]
    return AdapterError(f"{label}: {first[:300]}")


WHOLE = "the decisive audit"    # how a message names run_whole's one task


def run_whole(executor: Executor, source, given: dict, isolated: bool):
    """The audit `given` describes, whole, in one adapter actor (module docstring): its AuditResult, with
    a lost actor's retry under `errors` and the `where` record under `executor`."""
    import ray
    from ray.exceptions import RayActorError, RayTaskError

    assert executor.kind == RAY
    source = portable(source)
    remote, errors = _actor_class(executor), []
    for tries in range(1, MAX_TRIES + 1):
        actor = remote.remote(source, given, isolated)
        try:
            result, node = ray.get(actor.run_whole.remote())
        except RayActorError as exc:
            errors.append(_lost(WHOLE, tries, exc))
            continue
        except RayTaskError as exc:
            raise _failed(WHOLE, exc) from None
        finally:
            ray.kill(actor)
        result.errors = errors + list(result.errors)
        result.executor = where(executor, tries, [node])
        return result
    raise AssertionError("unreachable: the last try returns or raises")


def run(executor: Executor, engine, ctx, names: list, source, given: dict, isolated: bool) -> tuple:
    """Run `names` against the engine on the cluster: (rans, states, errors, actors, record): each
    task's `_Ran`, each actor's `AuditState` (its adapter calls), one line per retried task, the actors
    (the rows' `RemotePower` still asks them: `release` them after Holm), for `audit.run_audit` to
    assemble as it does a local run's jobs (module docstring), and the `where` record."""
    import ray
    from ray.exceptions import RayActorError, RayTaskError

    from specverify.audit import _Ran, record
    from specverify.battery.state import AuditState
    from specverify.checks import rare_event

    assert executor.kind == RAY
    start = time.perf_counter()
    source = portable(source)
    tasks, plans = _tasks(engine, ctx, names)
    remote = _actor_class(executor)

    def new_actor():
        return remote.remote(source, given, isolated)

    actors = [new_actor() for _ in range(_actor_count(executor, len(tasks)))]
    retired = []                     # actors replaced after a loss
    queue = collections.deque(tasks)
    running, free = {}, list(range(len(actors)))
    groups, shards, errors = {}, {}, []
    try:
        while queue or running:
            while queue and free:
                task, i = queue.popleft(), free.pop(0)
                task.tries += 1
                ctx.say(f"ray: {task.label}")
                if task.key[0] == "group":
                    running[actors[i].run_group.remote(task.key, list(task.key[1:]))] = (task, i)
                else:
                    level, index = task.key[1], task.key[2]
                    running[actors[i].run_shard.remote(level, plans[level][index])] = (task, i)
            ready, _ = ray.wait(list(running), num_returns=1)
            task, i = running.pop(ready[0])
            try:
                result = ray.get(ready[0])
            except RayActorError as exc:
                errors.append(_lost(task.label, task.tries, exc))
                retired.append(actors[i])
                actors[i] = new_actor()
                queue.appendleft(task)
                free.append(i)
                continue
            except RayTaskError as exc:
                raise _failed(task.label, exc) from None
            if task.key in groups or task.key in shards:
                raise AssertionError(f"{task.label}: a second result")     # a task's result is recorded once
            (groups if task.key[0] == "group" else shards)[task.key] = (result, i)
            free.append(i)
        rans = []
        for key, ((ran, powered, _node), i) in groups.items():
            for name, indices in powered.items():
                for j in indices:
                    ran.rows[name][j].power_fn = RemotePower(actors[i], key, name, j)
            rans.append(ran)
        if plans:
            ran = _Ran()
            found = [rare_event.row(level, specs, [shards[("shard", level, s["index"])][0][0] for s in specs],
                                    time.perf_counter() - start, ctx) for level, specs in plans.items()]
            for r in found:
                r.law = rare_event.OUTPUT_LAW
            record(engine, SHARDED, found, ran)
            ran.seconds[SHARDED] = ran.paid[SHARDED] = 0.0
            rans.append(ran)
        states = []
        for actor in actors:
            calls, changed = ray.get(actor.state.remote())
            states.append(AuditState(calls=calls, changed_inputs=changed))
    except BaseException:
        for actor in actors + retired:
            ray.kill(actor)
        raise
    nodes = [result[-1] for result, _ in [*groups.values(), *shards.values()]]
    return rans, states, errors, actors + retired, where(executor, len(actors) + len(retired), nodes)


def release(actors) -> None:
    """Close every actor's adapter and end the actors (after the driver has asked them for powers)."""
    import ray

    for actor in actors:
        try:
            ray.get(actor.close.remote(), timeout=30)
        except Exception:            # noqa: BLE001 -- a lost actor has nothing left to close
            pass
        ray.kill(actor)
