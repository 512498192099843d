"""io/readings: the readings file `simulate --sensors-out` writes is the one `estimate` and
`identify` read, column for column, with the noise it was asked for."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mbgen.io.readings import read_readings, write_readings


class TwoSensors:
    """A stand-in mechanism (n = 2): an encoder reading q₀, a rate sensor reading 2 q̇₁,
    and an accelerometer reading q̈₀ + q₁ along two axes."""

    sensor_labels = ["enc", "rate"]
    accelerometer_labels = ["imu.x", "imu.y"]

    def sensors(self, q: np.ndarray, qd: np.ndarray) -> np.ndarray:
        return np.column_stack([q[:, 0], 2.0 * qd[:, 1]])

    def accelerometers(self, q: np.ndarray, qdd: np.ndarray) -> np.ndarray:
        return np.stack([qdd[:, 0] + q[:, 1], -(qdd[:, 0] + q[:, 1])], axis=1)[:, :, None]


def run(steps: int) -> tuple[np.ndarray, ...]:
    t = np.arange(steps + 1) * 1e-3
    q = np.column_stack([np.sin(t), np.cos(3 * t)])
    qd = np.column_stack([np.cos(t), -3 * np.sin(3 * t)])
    qdd = np.column_stack([-np.sin(t), -9 * np.cos(3 * t)])
    return t, q, qd, qdd


def test_noiseless_readings_are_the_sensors_every_kth_step(tmp_path: Path) -> None:
    t, q, qd, qdd = run(100)
    path = write_readings(tmp_path / "r.csv", TwoSensors(), t, q, qd, qdd, [0.0] * 4, 10, 1)
    assert path.read_text().splitlines()[0] == "t,enc,rate,imu.x,imu.y"
    read_t, readings = read_readings(path, ["enc", "rate"], optional=["imu.x", "imu.y"])
    rows = np.arange(0, 101, 10)
    np.testing.assert_array_equal(read_t, t[rows])
    expected = np.column_stack([q[rows, 0], 2 * qd[rows, 1], qdd[rows, 0] + q[rows, 1],
                                -(qdd[rows, 0] + q[rows, 1])])
    np.testing.assert_allclose(readings, expected, rtol=1e-11, atol=1e-12)  # '%.12g' cells


def test_the_noise_has_each_columns_deviation_and_follows_the_seed(tmp_path: Path) -> None:
    t, q, qd, qdd = run(20_000)
    sigma = [1e-3, 0.1, 0.0, 2.0]
    mech = TwoSensors()
    labels = mech.sensor_labels + mech.accelerometer_labels
    clean = read_readings(write_readings(tmp_path / "c.csv", mech, t, q, qd, qdd, [0.0] * 4,
                                         1, 0), labels)[1]
    noisy = read_readings(write_readings(tmp_path / "n.csv", mech, t, q, qd, qdd, sigma, 1,
                                         7), labels)[1]
    spread = (noisy - clean).std(axis=0)
    assert spread[2] == 0.0
    for k in (0, 1, 3):  # 20 001 draws: the sample deviation within 3 %
        assert spread[k] == pytest.approx(sigma[k], rel=0.03)
    again = write_readings(tmp_path / "a.csv", mech, t, q, qd, qdd, sigma, 1, 7)
    assert again.read_bytes() == (tmp_path / "n.csv").read_bytes()
    other = write_readings(tmp_path / "o.csv", mech, t, q, qd, qdd, sigma, 1, 8)
    assert other.read_bytes() != again.read_bytes()
