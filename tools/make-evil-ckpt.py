#!/usr/bin/env python3
"""Writes tests/fixtures/nanogpt-tiny/evil-ckpt.pt from ckpt.pt beside it: the same nanoGPT
checkpoint (model, model_args, iter_num, config; the optimizer state left out to keep it
small) with one weight, `_orig_mod.transformer.h.0.attn.c_attn.weight`, replaced by a call
of `os.system("echo pwned")`. Python's pickle (and so `torch.load(weights_only=False)`)
would run that command; headlab must refuse the file by name and run nothing.

Standard library only, and nothing from the file is ever called: every global the pickle
names becomes a stub that records its calls, and the stubs are written back under the same
names. Run it from the repository root: `python3 tools/make-evil-ckpt.py`.
"""

import io
import os
import pickle
import sys
import types
import zipfile
from pathlib import Path

FOLDER = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "nanogpt-tiny"
SLOT = "_orig_mod.transformer.h.0.attn.c_attn.weight"


class Call:
    """`func(*args)` as the pickle said it, with the items and state it was then given."""

    def __init__(self, func, args):
        self.func, self.args, self.items, self.state = func, args, {}, None

    def __setitem__(self, key, value):
        self.items[key] = value

    def __setstate__(self, state):
        self.state = state


def stub(module, name):
    """A function standing for `module.name`, findable there so pickle writes its name back.
    `collections` exists for real: its stub is pickled as the real class instead."""
    if module not in sys.modules or module.startswith("torch"):
        for i, part in enumerate(module.split(".")):
            full = ".".join(module.split(".")[: i + 1])
            sys.modules.setdefault(full, types.ModuleType(full))
    fake = sys.modules[module]

    def call(*args):
        return Call(call, args)

    call.__module__, call.__qualname__, call.__name__ = module, name, name
    call.real = getattr(fake, name) if hasattr(fake, name) else None
    if call.real is None:
        setattr(fake, name, call)
    return call


class Reader(pickle.Unpickler):
    def find_class(self, module, name):
        return stub(module, name)

    def persistent_load(self, pid):
        return ("pid", pid)


class Writer(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, tuple) and len(obj) == 2 and obj[0] == "pid":
            return obj[1]
        return None

    def reducer_override(self, obj):
        if isinstance(obj, Call):
            func = getattr(obj.func, "real", None) or obj.func
            items = iter(obj.items.items()) if obj.items else None
            return (func, obj.args, obj.state, None, items)
        return NotImplemented


def storages(value, found):
    """The storage keys a value refers to."""
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "pid":
        found.add(value[1][2])
    elif isinstance(value, Call):
        storages(value.args, found)
        storages(value.items, found)
    elif isinstance(value, dict):
        for v in value.values():
            storages(v, found)
    elif isinstance(value, (list, tuple)):
        for v in value:
            storages(v, found)
    return found


def main():
    source = zipfile.ZipFile(FOLDER / "ckpt.pt")
    prefix = source.namelist()[0].split("/")[0]
    root = Reader(source.open(f"{prefix}/data.pkl")).load()
    del root["optimizer"]
    model = root["model"]
    assert SLOT in model.items, sorted(model.items)
    model.items[SLOT] = Call(os.system, ("echo pwned",))
    out = io.BytesIO()
    Writer(out, protocol=2).dump(root)
    keep = storages(root, set())
    with zipfile.ZipFile(FOLDER / "evil-ckpt.pt", "w", zipfile.ZIP_STORED) as z:
        for name in source.namelist():
            rest = name[len(prefix) + 1 :]
            if rest == "data.pkl":
                z.writestr(f"evil-ckpt/{rest}", out.getvalue())
            elif not rest.startswith("data/") or rest[len("data/") :] in keep:
                z.writestr(f"evil-ckpt/{rest}", source.read(name))
    print(f"wrote {FOLDER / 'evil-ckpt.pt'}: {SLOT} calls os.system")


if __name__ == "__main__":
    main()
