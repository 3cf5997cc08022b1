"""TVM objects from their JSON, without TVM's upgrade pass where the JSON is this TVM version's own.

``tvm.ir.load_json`` decodes the whole document, upgrades it from older schemas
and encodes it again before loading it: 7x the load itself, seconds for a
history or a schedule library of a few hundred workloads. JSON written by the
running TVM version needs no upgrade.
"""

from __future__ import annotations

import re
from typing import Any

_VERSION = re.compile(r'"tvm_version"\s*:\s*"([^"]*)"')


def load_tvm_json(text: str) -> Any:
    """The object ``text`` holds; JSON of another TVM version goes through ``tvm.ir.load_json``'s upgrade."""
    import tvm
    from tvm_ffi.serialization import from_json_graph_str

    found = _VERSION.search(text)
    if found is not None and found.group(1) == tvm.__version__:
        return from_json_graph_str(text)
    return tvm.ir.load_json(text)
