"""``edgetune provision``: bring TVM RPC up on boards over SSH, safely and idempotently.

Steps (one module each): :mod:`.ssh` connect with verified host keys,
:mod:`.detect` what the board is, :mod:`.runtime` the host's TVM version in a
venv on the board, :mod:`.tracker` the host tracker, :mod:`.tunnel` the SSH
forwards, :mod:`.server` the board's RPC server, :mod:`.verify` a round trip;
:mod:`.workflow` runs them in order for one or several boards.
"""
