"""Logistic regression trained with a generated gradient (the seed tutorial).

Run it with ``make demo`` or ``python examples/logistic_regression.py``. It prints the gradient
source that autodiff-ast writes for ``training_loss``, then trains for 100 steps.
"""

import numpy as np

inputs = np.array([[0.52, 1.12, 0.77],
                   [0.88, -1.08, 0.15],
                   [0.52, 0.06, -1.3],
                   [0.74, -2.49, 1.39]])
targets = np.array([True, True, False, True])


def sigmoid(x):
    return 0.5 * (np.tanh(x / 2.) + 1)


def logistic_predictions(weights, inputs):
    # Outputs probability of a label being true according to logistic model.
    return sigmoid(np.dot(inputs, weights))


def training_loss(weights, targets):
    # Training loss is the negative log-likelihood of the training labels.
    preds = logistic_predictions(weights, inputs)
    label_probabilities = preds * targets + (1 - preds) * (1 - targets)
    return -np.sum(np.log(label_probabilities))


def main():
    from autodiff_ast import grad

    training_gradient_fun = grad(training_loss)
    weights = np.array([0.0, 0.0, 0.0])
    print(f"Initial loss: {training_loss(weights, targets):.8g}")
    for _ in range(100):
        weights -= training_gradient_fun(weights, targets) * 0.01
    print(f"Trained loss: {training_loss(weights, targets):.8g}")
    print()
    print("The gradient autodiff-ast wrote for training_loss:")
    print()
    print(training_gradient_fun.source)


if __name__ == "__main__":
    main()
