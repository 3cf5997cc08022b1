"""edgetune.deployment: ship a tuned model to a board (``edgetune deploy``).

``edgetune.deploy(run, board=...)`` (:func:`edgetune.api.deploy`) and the
command both run :func:`edgetune.deployment.run.deploy_run`.
"""
