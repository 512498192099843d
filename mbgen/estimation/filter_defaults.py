"""The particle filter's and the errorEKF's defaults, in a module of their own so that the
command line can show them without importing the filters (and SciPy) before a command
runs."""

# 1000 particles after an initial belief of 100 times as many: with a pool of 20 the
# belief had holes around the truth in (q, q̇), and a wrong branch reached 0.99 in 15 of
# 100 of the prototype's runs (benchmarks/pf_calibration.py)
PARTICLES = 1000
POOL = 100
SIGMA_A = 1.0  # acceleration noise [m/s² on point coordinates, rad/s² on angles]
SPEED = 1.0  # the initial velocities' span [m/s or rad/s]
INTEGRATOR = "rk4"  # the prediction's explicit integrator (one of runtime.integration's PREDICTORS)
EKF_SPREAD = 0.1  # the errorEKF's initial span of z about q0 [m or rad] (σ: span/√3)
EKF_FORCE_SPREAD = 1.0  # ... σ of the unknown forces at the start [N or N m]
NOISE_FORCE = 1.0  # the unknown forces' random-walk intensity [N/√s or N m/√s]
