"""The autodiff tutorial (JAX's "automatic differentiation" walkthrough), with generated source.

Covers grad and its argnums, derivatives of a dict of parameters, value_and_grad, checking
derivatives with check_grads, and higher derivatives of tanh, each one a module you can read.

    python examples/autodiff_tutorial.py            # prints every step (it is small already)
"""

import numpy as np

from autodiff_ast import check_grads, grad, value_and_grad

# ---------------------------------------------------------------- a model to differentiate
inputs = np.array([[0.52, 1.12, 0.77],
                   [0.88, -1.08, 0.15],
                   [0.52, 0.06, -1.3],
                   [0.74, -2.49, 1.39]])
targets = np.array([1.0, 1.0, 0.0, 1.0])


def sigmoid(x):
    return 0.5 * (np.tanh(x / 2.0) + 1.0)


def predict(W, b, inputs):
    return sigmoid(np.dot(inputs, W) + b)


def loss(W, b):
    preds = predict(W, b, inputs)
    label_probs = preds * targets + (1.0 - preds) * (1.0 - targets)
    return -np.sum(np.log(label_probs))


def loss_of_params(params):
    """The same loss, its parameters in a dict (a pytree)."""
    return loss(params["W"], params["b"])


def show(title, transformed):
    print(f"---- {title}: the generated module")
    print(transformed.source)


def main():
    key = np.random.default_rng(0)
    W = key.standard_normal(3)
    b = float(key.standard_normal())

    # grad differentiates with respect to the first argument by default ...
    W_grad = grad(loss)(W, b)
    print("W_grad", W_grad)
    # ... argnums picks others: one int or a tuple.
    b_grad = grad(loss, argnums=1)(W, b)
    print("b_grad", b_grad)
    W_grad, b_grad = grad(loss, argnums=(0, 1))(W, b)
    print("(W_grad, b_grad)", W_grad, b_grad)

    # Parameters in a dict: the gradient comes back as a dict of the same shape.
    params = {"W": W, "b": b}
    print("dict gradient", grad(loss_of_params)(params))

    # value_and_grad computes both in one pass.
    loss_value, W_grad = value_and_grad(loss)(W, b)
    print("loss value", loss_value, "==", loss(W, b))

    # Checking against finite differences: a directional derivative and a dot-product test,
    # first and second order; it raises if the generated code is wrong.
    check_grads(loss, (W, b), order=2)
    print("check_grads: first and second derivatives agree with finite differences")

    # Higher derivatives of tanh: each grad reads the source the previous one wrote.
    d1 = grad(np.tanh)
    d2 = grad(d1)
    d3 = grad(d2)
    x = 0.5
    t = np.tanh(x)
    print(f"tanh'({x})   = {d1(x):.6f}  (1 - t^2            = {1 - t ** 2:.6f})")
    print(f"tanh''({x})  = {d2(x):.6f}  (-2 t (1 - t^2)     = {-2 * t * (1 - t ** 2):.6f})")
    print(f"tanh'''({x}) = {d3(x):.6f}  (2 (1 - t^2)(3t^2 - 1) = "
          f"{2 * (1 - t ** 2) * (3 * t ** 2 - 1):.6f})")

    both = grad(loss, argnums=(0, 1))
    both(W, b)
    show("grad(loss, argnums=(0, 1))", both)
    show("the third derivative of tanh", d3)


if __name__ == "__main__":
    main()
