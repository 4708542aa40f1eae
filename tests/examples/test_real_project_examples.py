"""The examples written as public PyTorch projects write them (examples/gcn.py, sine_lbfgs.py)
train as PyTorch does: a torch twin of each model gets the kiln model's weights and the same
data, and takes the same steps; losses must match tightly (float64) or within float32 rounding.
Each script also runs end to end at a tiny size, as a user runs it.
"""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from example_scripts import load_example, run_example

torch = pytest.importorskip("torch")
tnn = torch.nn


@pytest.fixture(autouse=True)
def torch_one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _load_into_torch(tmodel, kmodel) -> None:
    tmodel.load_state_dict({k: torch.from_numpy(np.array(v.detach().numpy())) for k, v in
                            kmodel.state_dict().items()}, strict=True)


# ---- sine_lbfgs: LSTM cells trained with L-BFGS ------------------------------------------------

class TorchSequence(tnn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.hidden = hidden
        self.lstm1 = tnn.LSTMCell(1, hidden)
        self.lstm2 = tnn.LSTMCell(hidden, hidden)
        self.linear = tnn.Linear(hidden, 1)

    def forward(self, input, future=0):
        h = c = h2 = c2 = torch.zeros(input.size(0), self.hidden, dtype=torch.double)
        outputs = []
        for input_t in input.split(1, dim=1):
            h, c = self.lstm1(input_t, (h, c))
            h2, c2 = self.lstm2(h, (h2, c2))
            output = self.linear(h2)
            outputs.append(output)
        for _ in range(future):
            h, c = self.lstm1(output, (h, c))
            h2, c2 = self.lstm2(h, (h2, c2))
            output = self.linear(h2)
            outputs.append(output)
        return torch.cat(outputs, dim=1)


def _torch_lbfgs(seq, input, target, test_input, test_target, steps, future):
    criterion = tnn.MSELoss()
    optimizer = torch.optim.LBFGS(seq.parameters(), lr=0.8)
    losses = []
    for _ in range(steps):
        def closure():
            optimizer.zero_grad()
            loss = criterion(seq(input), target)
            loss.backward()
            return loss
        loss = optimizer.step(closure)
        with torch.no_grad():
            test_loss = criterion(seq(test_input, future=future)[:, :-future], test_target)
        losses.append((loss.item(), test_loss.item()))
    return losses


def test_sine_lbfgs_trains_like_torch():
    ex = load_example("sine_lbfgs")
    data = ex.make_waves(6, 30)
    kiln.manual_seed(0)
    kseq = ex.Sequence(6).double()
    tseq = TorchSequence(6).double()
    _load_into_torch(tseq, kseq)
    k_args = [kiln.from_numpy(a) for a in (data[3:, :-1], data[3:, 1:], data[:3, :-1], data[:3, 1:])]
    t_args = [torch.from_numpy(np.ascontiguousarray(a)) for a in (data[3:, :-1], data[3:, 1:], data[:3, :-1],
                                                                    data[:3, 1:])]
    klosses = ex.train(kseq, *k_args, steps=3, future=4)
    tlosses = _torch_lbfgs(tseq, *t_args, steps=3, future=4)
    # float64 products in NumPy's OpenBLAS and torch's BLAS round differently on some CPUs, and L-BFGS's line
    # search carries the differences on: an AVX2 Zen 3 measured 3.5e-9 relative on the last test loss and
    # 9e-10 on a weight of about 0.004 (the weights are of order 0.3)
    np.testing.assert_allclose(klosses, tlosses, rtol=1e-7, atol=1e-12)
    for name, value in kseq.state_dict().items():
        np.testing.assert_allclose(value.numpy(), tseq.state_dict()[name].numpy(), rtol=1e-7, atol=1e-8)


def test_sine_lbfgs_runs_as_a_script():
    out = run_example("sine_lbfgs", "--steps", "2", "--waves", "5", "--length", "25", "--hidden", "4",
                      "--future", "3").stdout
    assert out.count("train loss") == 2


# ---- gcn: a graph network with a sparse adjacency ----------------------------------------------

class TorchGraphConv(tnn.Module):
    def __init__(self, input_dim, output_dim):
        super().__init__()
        self.kernel = tnn.Parameter(torch.empty(input_dim, output_dim))
        self.bias = tnn.Parameter(torch.empty(output_dim))

    def forward(self, x, adj):
        return torch.spmm(adj, torch.mm(x, self.kernel)) + self.bias


class TorchGCN(tnn.Module):
    def __init__(self, input_dim, hidden_dim, output_dim):
        super().__init__()
        self.gc1 = TorchGraphConv(input_dim, hidden_dim)
        self.gc2 = TorchGraphConv(hidden_dim, output_dim)

    def forward(self, x, adj):
        return torch.log_softmax(self.gc2(torch.relu(self.gc1(x, adj)), adj), dim=1)


def _torch_graph(ex, nodes, classes, words, seed):
    """The example's graph prepared with torch's own sparse ops, as the PyTorch example does."""
    content, labels, edges = ex.make_graph(nodes, classes, words, seed)
    features = torch.FloatTensor(content)
    scale = 1 / torch.sum(features, dim=1)
    scale[scale == float("inf")] = 0
    features = torch.diag(scale).to_sparse() @ features
    adj = torch.eye(nodes) + torch.sparse_coo_tensor(edges.T, torch.ones(edges.shape[0]), (nodes, nodes))
    degree = torch.sqrt(1 / torch.sum(adj, dim=1))
    degree = torch.diag(degree).to_sparse()
    adj = degree @ adj @ degree
    return features, torch.LongTensor(labels), adj.to_sparse()


@pytest.mark.filterwarnings("ignore:Sparse invariant checks")
@pytest.mark.filterwarnings("error::RuntimeWarning")  # a compiled step that fell back to eager
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_gcn_trains_like_torch(compiled):
    ex = load_example("gcn")
    nodes, classes, words = 40, 3, 30
    features, labels, adj = ex.load_graph(nodes, classes, words, seed=1)
    tfeatures, tlabels, tadj = _torch_graph(ex, nodes, classes, words, seed=1)
    np.testing.assert_allclose(features.numpy(), tfeatures.numpy(), rtol=1e-6)
    np.testing.assert_allclose(adj.to_dense().numpy(), tadj.to_dense().numpy(), rtol=1e-6)
    kiln.manual_seed(0)
    kmodel = ex.GCN(words, 8, classes, True, dropout_p=0.0)
    tmodel = TorchGCN(words, 8, classes)
    _load_into_torch(tmodel, kmodel)
    mask = kiln.arange(0, nodes, 2)
    kopt = kiln.optim.Adam(kmodel.parameters(), lr=0.01, weight_decay=5e-4)
    topt = torch.optim.Adam(tmodel.parameters(), lr=0.01, weight_decay=5e-4)
    criterion, tcriterion = kiln.nn.NLLLoss(), tnn.NLLLoss()
    step = (kiln.compile(ex.train_iter) if compiled else ex.train_iter)
    klosses, tlosses = [], []
    for _ in range(5):
        klosses.append(step(kmodel, kopt, criterion, features, labels, adj, mask).item())
        topt.zero_grad()
        loss = tcriterion(tmodel(tfeatures, tadj)[torch.arange(0, nodes, 2)], tlabels[torch.arange(0, nodes, 2)])
        loss.backward()
        topt.step()
        tlosses.append(loss.item())
    np.testing.assert_allclose(klosses, tlosses, rtol=1e-5, atol=1e-6)
    assert ex.accuracy(kmodel, features, labels, adj, mask) == pytest.approx(
        (tmodel(tfeatures, tadj)[torch.arange(0, nodes, 2)].argmax(1) == tlabels[torch.arange(0, nodes, 2)])
        .float().mean().item())


def test_gcn_runs_as_a_script_and_reloads_the_whole_module():
    out = run_example("gcn", "--nodes", "40", "--words", "30", "--epochs", "3", "--no-accel").stdout
    assert "Using cpu device" in out and "test accuracy" in out
