"""Compiled models: build a whole model (untuned, or with a history's best schedules), export it, run it on a board.

Below both tuning (the end-to-end check after a tune) and deploy (what is
shipped), which use the same compile, export and run.
"""
