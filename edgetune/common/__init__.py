"""Constants and small helpers that several of edgetune's roles share.

One home for them, so that the tuning loop, the history and the search agree
on what a failed measurement looks like, and processes and RPC sessions are
started and cleaned up the same way everywhere.
"""
