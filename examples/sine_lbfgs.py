"""Teach an LSTM to continue sine waves, trained with L-BFGS and a closure.

    python examples/sine_lbfgs.py                     # 10 steps on 97 waves of 1000 points
    python examples/sine_lbfgs.py --steps 2 --waves 6 --length 40 --hidden 8    # a tiny run

Written the way PyTorch's time-sequence example is: float64 throughout, two stacked
``nn.LSTMCell`` s fed one point at a time, ``optim.LBFGS`` whose ``step(closure)``
re-evaluates the loss as often as its line search needs, and predictions of the future
under ``kiln.no_grad()``. Each wave is shifted by a random phase; the model sees all but
three for training and is tested on the rest.
"""
import argparse

import numpy as np

import kiln
import kiln.nn as nn
import kiln.optim as optim


class Sequence(nn.Module):
    """Two LSTM cells and a linear read-out; `future` extra steps feed predictions back in."""

    def __init__(self, hidden=51):
        super().__init__()
        self.hidden = hidden
        self.lstm1 = nn.LSTMCell(1, hidden)
        self.lstm2 = nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)

    def forward(self, input, future=0):
        outputs = []
        h_t = kiln.zeros(input.size(0), self.hidden, dtype=kiln.double)
        c_t = kiln.zeros(input.size(0), self.hidden, dtype=kiln.double)
        h_t2 = kiln.zeros(input.size(0), self.hidden, dtype=kiln.double)
        c_t2 = kiln.zeros(input.size(0), self.hidden, dtype=kiln.double)
        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for _ in range(future):
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        return kiln.cat(outputs, dim=1)


def make_waves(waves, length, period=20, seed=2):
    """sin((t + shift) / period) for `waves` random shifts: (waves, length) float64."""
    rng = np.random.default_rng(seed)
    t = np.arange(length) + rng.integers(-4 * period, 4 * period, waves)[:, None]
    return np.sin(t / period).astype("float64")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10, help="L-BFGS steps")
    p.add_argument("--waves", type=int, default=100)
    p.add_argument("--length", type=int, default=1000)
    p.add_argument("--hidden", type=int, default=51)
    p.add_argument("--future", type=int, default=100, help="points to predict past each test wave")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    np.random.seed(args.seed)
    kiln.manual_seed(args.seed)
    data = make_waves(args.waves, args.length)
    input = kiln.from_numpy(data[3:, :-1])
    target = kiln.from_numpy(data[3:, 1:])
    test_input = kiln.from_numpy(data[:3, :-1])
    test_target = kiln.from_numpy(data[:3, 1:])

    seq = Sequence(args.hidden).double()
    return train(seq, input, target, test_input, test_target, args.steps, args.future)


def train(seq, input, target, test_input, test_target, steps, future):
    """`steps` L-BFGS steps; (train loss, test loss) after each."""
    criterion = nn.MSELoss()
    optimizer = optim.LBFGS(seq.parameters(), lr=0.8)
    losses = []
    for i in range(steps):
        def closure():
            optimizer.zero_grad()
            out = seq(input)
            loss = criterion(out, target)
            loss.backward()
            return loss
        loss = optimizer.step(closure)
        with kiln.no_grad():
            pred = seq(test_input, future=future)
            test_loss = criterion(pred[:, :-future], test_target)
        losses.append((loss.item(), test_loss.item()))
        print(f"step {i}: train loss {loss.item():.6f}  test loss {test_loss.item():.6f}")
    return losses


if __name__ == "__main__":
    main()
