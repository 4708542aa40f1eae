"""A graph convolutional network classifying the nodes of a citation-like graph.

    python examples/gcn.py                        # 300 nodes, 200 epochs
    python examples/gcn.py --nodes 60 --epochs 5  # a tiny run

Written the way PyTorch's graph examples are: device-agnostic through ``kiln.accelerator``,
the normalized adjacency as a sparse COO tensor multiplied with ``kiln.spmm``, parameters
made with the legacy ``kiln.Tensor(rows, cols)`` constructor, evaluation under
``kiln.inference_mode()``, and the whole trained module saved with ``kiln.save(model, f)``
and loaded back with ``kiln.load(f, weights_only=False)``.

The graph is synthetic and ships with no files: nodes of the same class link more often
(a stochastic block model) and carry bag-of-words features drawn from their class's words.
"""
import argparse
import os
import tempfile

import numpy as np

import kiln
import kiln.nn.functional as F
from kiln import nn
from kiln.optim import Adam


class GraphConv(nn.Module):
    """H' = A_hat (H W) (+ b), with A_hat the normalized sparse adjacency."""

    def __init__(self, input_dim, output_dim, use_bias=False):
        super().__init__()
        self.kernel = nn.Parameter(kiln.Tensor(input_dim, output_dim))
        nn.init.xavier_normal_(self.kernel)
        self.bias = None
        if use_bias:
            self.bias = nn.Parameter(kiln.Tensor(output_dim))
            nn.init.zeros_(self.bias)

    def forward(self, input_tensor, adj_mat):
        support = kiln.mm(input_tensor, self.kernel)
        output = kiln.spmm(adj_mat, support)
        if self.bias is not None:
            output = output + self.bias
        return output


class GCN(nn.Module):
    """Two graph convolutions with ReLU and dropout between them; log-probabilities out."""

    def __init__(self, input_dim, hidden_dim, output_dim, use_bias=True, dropout_p=0.1):
        super().__init__()
        self.gc1 = GraphConv(input_dim, hidden_dim, use_bias=use_bias)
        self.gc2 = GraphConv(hidden_dim, output_dim, use_bias=use_bias)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, input_tensor, adj_mat):
        x = self.gc1(input_tensor, adj_mat)
        x = F.relu(x)
        x = self.dropout(x)
        x = self.gc2(x, adj_mat)
        return F.log_softmax(x, dim=1)


def make_graph(nodes, classes, words, seed):
    """(binary features (V, words), labels (V,), edges (E, 2)) of a stochastic block model."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, nodes)
    class_words = rng.random((classes, words)) < 0.08
    features = (rng.random((nodes, words)) < 0.02) | (class_words[labels] & (rng.random((nodes, words)) < 0.5))
    same = labels[:, None] == labels[None, :]
    links = np.triu(rng.random((nodes, nodes)) < np.where(same, 8.0 / nodes, 0.5 / nodes), k=1)
    edges = np.argwhere(links | links.T)
    return features.astype(np.int32), labels, edges.astype(np.int32)


def load_graph(nodes, classes, words, seed, device="cpu"):
    """Row-normalized features, labels and the renormalized adjacency D^-1/2 (A + I) D^-1/2."""
    content, labels, edges = make_graph(nodes, classes, words, seed)
    features = kiln.FloatTensor(content)
    scale_vector = kiln.sum(features, dim=1)
    scale_vector = 1 / scale_vector
    scale_vector[scale_vector == float("inf")] = 0
    features = kiln.diag(scale_vector).to_sparse() @ features
    labels = kiln.LongTensor(labels)

    V, E = nodes, edges.shape[0]
    adj_mat = kiln.sparse_coo_tensor(edges.T, kiln.ones(E), (V, V))
    adj_mat = kiln.eye(V) + adj_mat
    degree_mat = kiln.sum(adj_mat, dim=1)
    degree_mat = kiln.sqrt(1 / degree_mat)
    degree_mat = kiln.diag(degree_mat).to_sparse()
    adj_mat = degree_mat @ adj_mat @ degree_mat
    return features.to(device), labels.to(device), adj_mat.to_sparse().to(device)


def train_iter(model, optimizer, criterion, features, labels, adj_mat, mask):
    model.train()
    optimizer.zero_grad()
    output = model(features, adj_mat)
    loss = criterion(output[mask], labels[mask])
    loss.backward()
    optimizer.step()
    return loss


def accuracy(model, features, labels, adj_mat, mask):
    model.eval()
    with kiln.inference_mode():
        output = model(features, adj_mat)
        predictions = output[mask].argmax(dim=1)
        return (predictions == labels[mask]).float().mean().item()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=300)
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--words", type=int, default=200)
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--l2", type=float, default=5e-4)
    p.add_argument("--hidden-dim", type=int, default=16)
    p.add_argument("--dropout-p", type=float, default=0.5)
    p.add_argument("--no-accel", action="store_true", help="run on the CPU even if a GPU is there")
    p.add_argument("--seed", type=int, default=42)
    args = p.parse_args(argv)

    use_accel = not args.no_accel and kiln.accelerator.is_available()
    kiln.manual_seed(args.seed)
    device = kiln.accelerator.current_accelerator() if use_accel else kiln.device("cpu")
    print(f"Using {device} device")

    features, labels, adj_mat = load_graph(args.nodes, args.classes, args.words, args.seed, device)
    idx = kiln.randperm(len(labels)).to(device)
    n_train = len(labels) * 6 // 10
    idx_train, idx_test = idx[:n_train], idx[n_train:]

    gcn = GCN(features.shape[1], args.hidden_dim, args.classes, True, args.dropout_p).to(device)
    optimizer = Adam(gcn.parameters(), lr=args.lr, weight_decay=args.l2)
    criterion = nn.NLLLoss()

    for epoch in range(args.epochs):
        loss = train_iter(gcn, optimizer, criterion, features, labels, adj_mat, idx_train)
        if epoch % 50 == 0 or epoch == args.epochs - 1:
            train_acc = accuracy(gcn, features, labels, adj_mat, idx_train)
            print(f"epoch {epoch:3d}  loss {loss.item():.4f}  train acc {train_acc:.3f}")
    test_acc = accuracy(gcn, features, labels, adj_mat, idx_test)
    print(f"test accuracy {test_acc:.3f}")

    path = os.path.join(tempfile.mkdtemp(), "gcn.pt")
    kiln.save(gcn, path)                                   # the whole module, pickled
    restored = kiln.load(path, weights_only=False)         # trusted file: allow unpickling
    assert accuracy(restored, features, labels, adj_mat, idx_test) == test_acc
    return test_acc


if __name__ == "__main__":
    main()
