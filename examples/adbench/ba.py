"""The ADBench bundle adjustment objective, written with plain NumPy.

Each of the ``p`` observations ``obs[i] = (camera, point)`` gives a reprojection error: rotate
the point into the camera frame (Rodrigues' formula), project, apply radial distortion and the
focal length and principal point, compare with the feature ``feats[i]`` and scale by the weight
``w[i]``. Each weight also gives a "Zach" weight error ``1 - w^2`` (ADBench's paper,
arXiv:1807.10129, section 4.2). A camera is 11 numbers: rotation (3), centre (3), focal length
(1), principal point (2), radial distortion (2). ADBench measures the Jacobian of the residuals.

>>> import numpy as np
>>> from adbench_data import read_ba, data_path
>>> cams, points, w, obs, feats = read_ba(data_path("ba", "test.txt"))
>>> np.round(compute_reproj_err(cams[0], points[0], w[0], feats[0]), 6)
array([-0.269049,  0.259945])
"""

import numpy as np

ROT_IDX = 0
C_IDX = 3
F_IDX = 6
X0_IDX = 7
RAD_IDX = 9


def cross(a, b):
    """The cross product of two 3-vectors."""
    return np.array([a[1] * b[2] - a[2] * b[1],
                     a[2] * b[0] - a[0] * b[2],
                     a[0] * b[1] - a[1] * b[0]])


def rodrigues_rotate_point(rot, x):
    """Rotate x by the axis-angle vector rot."""
    sqtheta = np.sum(rot * rot)
    if sqtheta != 0.0:
        theta = np.sqrt(sqtheta)
        costheta = np.cos(theta)
        sintheta = np.sin(theta)
        theta_inverse = 1.0 / theta
        w = theta_inverse * rot
        w_cross_x = cross(w, x)
        tmp = np.dot(w, x) * (1.0 - costheta)
        return x * costheta + w_cross_x * sintheta + w * tmp
    else:
        return x + cross(rot, x)


def radial_distort(rad_params, proj):
    """Apply the two-parameter radial distortion to a projected 2-vector."""
    rsq = np.sum(proj * proj)
    scale = 1.0 + rad_params[0] * rsq + rad_params[1] * rsq * rsq
    return proj * scale


def project(cam, x):
    """Where camera cam sees the point x, in pixels."""
    xcam = rodrigues_rotate_point(cam[ROT_IDX:ROT_IDX + 3], x - cam[C_IDX:C_IDX + 3])
    distorted = radial_distort(cam[RAD_IDX:RAD_IDX + 2], xcam[0:2] / xcam[2])
    return distorted * cam[F_IDX] + cam[X0_IDX:X0_IDX + 2]


def compute_reproj_err(cam, x, w, feat):
    """The weighted reprojection error of one observation (2 numbers)."""
    return w * (project(cam, x) - feat)


def compute_w_err(w):
    """Zach's weight error of one observation."""
    return 1.0 - w * w


def ba_objective(cams, x, w, obs, feats):
    """All residuals: 2p reprojection errors (observation by observation), then p weight errors."""
    p = obs.shape[0]
    reproj_err = np.zeros((p, 2))
    w_err = np.zeros(p)
    for i in range(p):
        reproj_err[i] = compute_reproj_err(cams[obs[i, 0]], x[obs[i, 1]], w[i], feats[i])
        w_err[i] = compute_w_err(w[i])
    return np.concatenate((np.ravel(reproj_err), w_err))
