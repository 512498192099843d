"""Studies of many runs (``mbgen sweep``): the study file, its runs, their results."""
