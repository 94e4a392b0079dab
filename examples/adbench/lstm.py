"""The ADBench LSTM objective, written with plain NumPy loops.

A stack of ``l`` LSTM layers with ``b`` hidden units reads a one-hot-like sequence (``c x b``)
and predicts each next character; the objective is the average cross-entropy (ADBench's paper,
arXiv:1807.10129, section 4.4). ``main_params`` (``2l x 4b``) holds, per layer, a row of gate
weights then a row of gate biases (forget, input, output, change); ``extra_params`` (``3 x b``)
holds the input scaling, the output scaling and the output bias; ``state`` (``2l x b``) holds,
per layer, the hidden state then the cell state.

ADBench's reference implementations normalise each prediction with ``log(sum(exp(ypred)) + 2)``
(a Julia ``sum(exp(y), 2)`` read as "plus 2"); we do the same so ADBench's expected values hold.

>>> import numpy as np
>>> from adbench_data import read_lstm, data_path
>>> main_params, extra_params, state, sequence = read_lstm(data_path("lstm", "lstm_l2_c1024.txt"))
>>> print(f"{lstm_objective(main_params, extra_params, state, sequence):.6f}")
0.666665
"""

import numpy as np


def sigmoid(x):
    """The logistic function."""
    return 1.0 / (1.0 + np.exp(-x))


def lstm_model(weight, bias, hidden, cell, inp):
    """One LSTM layer: the new hidden and cell states."""
    hsize = hidden.shape[0]
    forget = sigmoid(inp * weight[0:hsize] + bias[0:hsize])
    ingate = sigmoid(hidden * weight[hsize:2 * hsize] + bias[hsize:2 * hsize])
    outgate = sigmoid(inp * weight[2 * hsize:3 * hsize] + bias[2 * hsize:3 * hsize])
    change = np.tanh(hidden * weight[3 * hsize:] + bias[3 * hsize:])
    cell = cell * forget + ingate * change
    hidden = outgate * np.tanh(cell)
    return hidden, cell


def lstm_predict(w, w2, s, x):
    """Run every layer on the input x: the prediction and the new state."""
    s2 = s.copy()
    x2 = x * w2[0]
    for i in range(0, s.shape[0], 2):
        hidden, cell = lstm_model(w[i], w[i + 1], s[i], s[i + 1], x2)
        s2[i] = hidden
        s2[i + 1] = cell
        x2 = hidden
    return x2 * w2[1] + w2[2], s2


def lstm_objective(main_params, extra_params, state, sequence):
    """The average cross-entropy of the predicted next characters."""
    total = 0.0
    count = 0
    inp = sequence[0]
    s = state
    for t in range(sequence.shape[0] - 1):
        ypred, s = lstm_predict(main_params, extra_params, s, inp)
        ynorm = ypred - np.log(np.sum(np.exp(ypred)) + 2.0)
        ygold = sequence[t + 1]
        total = total + np.sum(ygold * ynorm)
        count = count + ygold.shape[0]
        inp = ygold
    return -total / count
