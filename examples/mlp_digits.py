"""A multilayer perceptron trained with Adam on scikit-learn's handwritten digits.

The layer sizes are 64-128-128-10: the usual 784-128-128-10 MLP is for MNIST's 28x28 images,
while the digits data set that ships with scikit-learn (``load_digits``, 1797 images) is 8x8,
so the input layer has 64 units. We do not upsample the images. The gradient of the loss with
respect to a dict of parameters is generated once (printed at the end); training shows a
progress bar, reports the accuracy on held-out test images (a stratified 25% split) and saves
the loss curve as a PNG.

    python examples/mlp_digits.py                 # 20 epochs: test accuracy >= 95%
    python examples/mlp_digits.py --small         # 2 epochs (the smoke test)
    python examples/mlp_digits.py --png curve.png --epochs 60

Needs the ``examples`` extra: ``pip install -e '.[examples]'`` (scikit-learn, matplotlib).
"""

import argparse
import sys
import time

import numpy as np

from autodiff_ast import value_and_grad

SIZES = (64, 128, 128, 10)


def predict(params, x):
    h = np.tanh(x @ params["W1"] + params["b1"])
    h = np.tanh(h @ params["W2"] + params["b2"])
    return h @ params["W3"] + params["b3"]


def loss(params, x, y):
    """Mean cross-entropy of the softmax of the logits; y is one-hot."""
    logits = predict(params, x)
    shifted = logits - np.max(logits, axis=1, keepdims=True)
    log_probs = shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    return -np.mean(np.sum(log_probs * y, axis=1))


def init_params(rng):
    params = {}
    for k, (n_in, n_out) in enumerate(zip(SIZES[:-1], SIZES[1:]), start=1):
        params[f"W{k}"] = rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)
        params[f"b{k}"] = np.zeros(n_out)
    return params


class Adam:
    """Adam (Kingma & Ba) on a dict of arrays."""

    def __init__(self, params, rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8):
        self.rate, self.beta1, self.beta2, self.eps = rate, beta1, beta2, eps
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def update(self, params, grads):
        self.t += 1
        out = {}
        for k, g in grads.items():
            self.m[k] = self.beta1 * self.m[k] + (1 - self.beta1) * g
            self.v[k] = self.beta2 * self.v[k] + (1 - self.beta2) * g * g
            m_hat = self.m[k] / (1 - self.beta1 ** self.t)
            v_hat = self.v[k] / (1 - self.beta2 ** self.t)
            out[k] = params[k] - self.rate * m_hat / (np.sqrt(v_hat) + self.eps)
        return out


def progress(epoch, epochs, value, width=30, stream=sys.stdout):
    """A one-line progress bar, redrawn in place in a terminal, one line per epoch otherwise."""
    done = int(width * epoch / epochs)
    bar = "#" * done + "-" * (width - done)
    text = f"epoch {epoch:3d}/{epochs} [{bar}] loss {value:.4f}"
    if stream.isatty():
        stream.write("\r" + text + ("\n" if epoch == epochs else ""))
    else:
        stream.write(text + "\n")
    stream.flush()


def accuracy(params, x, labels):
    return float(np.mean(np.argmax(predict(params, x), axis=1) == labels))


def load_data(seed):
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError:
        sys.exit("mlp_digits.py needs scikit-learn: pip install -e '.[examples]'")
    digits = load_digits()
    x = digits.data / 16.0  # pixel values 0..16
    return train_test_split(x, digits.target, test_size=0.25, random_state=seed,
                            stratify=digits.target)


def save_curve(losses, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no loss curve (pip install -e '.[examples]')")
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(np.arange(1, len(losses) + 1), losses)
    ax.set_xlabel("epoch")
    ax.set_ylabel("mean training loss")
    ax.set_yscale("log")
    ax.set_title("MLP 64-128-128-10 on load_digits, Adam")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"loss curve written to {path}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rate", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--png", default="mlp_digits_loss.png", help="where the curve goes")
    parser.add_argument("--small", action="store_true", help="2 epochs (a smoke test)")
    args = parser.parse_args(argv)
    epochs = 2 if args.small else args.epochs

    x_train, x_test, y_train, y_test = load_data(args.seed)
    one_hot = np.eye(10)[y_train]
    rng = np.random.default_rng(args.seed)
    params = init_params(rng)
    optimizer = Adam(params, rate=args.rate)
    step = value_and_grad(loss)
    losses = []
    start = time.perf_counter()
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(x_train))
        total = 0.0
        for first in range(0, len(order), args.batch):
            batch = order[first:first + args.batch]
            value, grads = step(params, x_train[batch], one_hot[batch])
            params = optimizer.update(params, grads)
            total += value * len(batch)
        losses.append(total / len(order))
        progress(epoch, epochs, losses[-1])
    seconds = time.perf_counter() - start
    train_acc = accuracy(params, x_train, y_train)
    test_acc = accuracy(params, x_test, y_test)
    print(f"trained {epochs} epochs in {seconds:.1f} s: train accuracy {train_acc:.4f}, "
          f"test accuracy {test_acc:.4f} on {len(x_test)} held-out images")
    save_curve(losses, args.png)
    print()
    print("The generated value_and_grad of loss:")
    print(step.source)
    return test_acc


if __name__ == "__main__":
    main()
