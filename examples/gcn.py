"""A graph convolutional network classifying the nodes of a citation-like graph.

    python examples/gcn.py                        # 300 nodes, 200 epochs
    python examples/gcn.py --nodes 60 --epochs 5  # a tiny run

Written as PyTorch's graph examples are: device-agnostic through ``kiln.accelerator``, a
sparse COO adjacency multiplied with ``kiln.spmm``, parameters made with the legacy
``kiln.Tensor(rows, cols)``, evaluation under ``kiln.inference_mode()``, the whole module saved
with ``kiln.save(model, f)`` and loaded with ``kiln.load(f, weights_only=False)``; synthetic data.
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
        self.kernel = nn.Parameter(nn.init.xavier_normal_(kiln.Tensor(input_dim, output_dim)))
        self.bias = nn.Parameter(nn.init.zeros_(kiln.Tensor(output_dim))) if use_bias else None

    def forward(self, input_tensor, adj_mat):
        output = kiln.spmm(adj_mat, kiln.mm(input_tensor, self.kernel))
        return output + self.bias if self.bias is not None else output


class GCN(nn.Module):
    """Two graph convolutions with ReLU and dropout between them; log-probabilities out."""
    def __init__(self, input_dim, hidden_dim, output_dim, use_bias=True, dropout_p=0.1):
        super().__init__()
        self.gc1 = GraphConv(input_dim, hidden_dim, use_bias=use_bias)
        self.gc2 = GraphConv(hidden_dim, output_dim, use_bias=use_bias)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, input_tensor, adj_mat):
        x = self.dropout(F.relu(self.gc1(input_tensor, adj_mat)))
        return F.log_softmax(self.gc2(x, adj_mat), dim=1)


def make_graph(nodes, classes, words, seed):
    """Binary features (V, words), labels (V,) and edges of a stochastic block model."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, nodes)
    class_words = rng.random((classes, words)) < 0.08
    features = (rng.random((nodes, words)) < 0.02) | (class_words[labels] & (rng.random((nodes, words)) < 0.5))
    link = np.where(labels[:, None] == labels[None, :], 8.0 / nodes, 0.5 / nodes)  # same class: 16x likelier
    links = np.triu(rng.random((nodes, nodes)) < link, k=1)
    return features.astype(np.int32), labels, np.argwhere(links | links.T).astype(np.int32)  # edges (E, 2)


def load_graph(nodes, classes, words, seed, device="cpu"):
    """Row-normalized features, labels and the renormalized adjacency D^-1/2 (A + I) D^-1/2."""
    content, labels, edges = make_graph(nodes, classes, words, seed)
    features = kiln.FloatTensor(content)
    scale_vector = 1 / kiln.sum(features, dim=1)
    scale_vector[scale_vector == float("inf")] = 0
    features = kiln.diag(scale_vector).to_sparse() @ features
    labels = kiln.LongTensor(labels)
    adj_mat = kiln.eye(nodes) + kiln.sparse_coo_tensor(edges.T, kiln.ones(edges.shape[0]), (nodes, nodes))
    degree_mat = kiln.diag(kiln.sqrt(1 / kiln.sum(adj_mat, dim=1))).to_sparse()
    adj_mat = degree_mat @ adj_mat @ degree_mat
    return features.to(device), labels.to(device), adj_mat.to_sparse().to(device)


def train_iter(model, optimizer, criterion, features, labels, adj_mat, mask):
    model.train()
    optimizer.zero_grad()
    loss = criterion(model(features, adj_mat)[mask], labels[mask])
    loss.backward()
    optimizer.step()
    return loss


def accuracy(model, features, labels, adj_mat, mask):
    model.eval()
    with kiln.inference_mode():
        predictions = model(features, adj_mat)[mask].argmax(dim=1)
        return (predictions == labels[mask]).float().mean().item()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, kind, default in (("nodes", int, 300), ("classes", int, 4), ("words", int, 200), ("epochs", int, 200),
                                ("lr", float, 0.01), ("l2", float, 5e-4), ("hidden-dim", int, 16),
                                ("dropout-p", float, 0.5), ("seed", int, 42)):
        p.add_argument(f"--{name}", type=kind, default=default)
    p.add_argument("--no-accel", action="store_true", help="run on the CPU even if a GPU is there")
    args = p.parse_args(argv)
    kiln.manual_seed(args.seed)
    use_accel = not args.no_accel and kiln.accelerator.is_available()  # a GPU, if kiln can use one
    device = kiln.accelerator.current_accelerator() if use_accel else kiln.device("cpu")
    print(f"Using {device} device")
    features, labels, adj_mat = load_graph(args.nodes, args.classes, args.words, args.seed, device)
    idx = kiln.randperm(len(labels)).to(device)
    idx_train, idx_test = idx[:len(labels) * 6 // 10], idx[len(labels) * 6 // 10:]
    gcn = GCN(features.shape[1], args.hidden_dim, args.classes, True, args.dropout_p).to(device)
    optimizer, criterion = Adam(gcn.parameters(), lr=args.lr, weight_decay=args.l2), nn.NLLLoss()
    for epoch in range(args.epochs):
        loss = train_iter(gcn, optimizer, criterion, features, labels, adj_mat, idx_train)
        if epoch % 50 == 0 or epoch == args.epochs - 1:
            print(f"epoch {epoch:3d}  loss {loss.item():.4f}  train acc "
                  f"{accuracy(gcn, features, labels, adj_mat, idx_train):.3f}")
    test_acc = accuracy(gcn, features, labels, adj_mat, idx_test)
    print(f"test accuracy {test_acc:.3f}")
    path = os.path.join(tempfile.mkdtemp(), "gcn.pt")
    kiln.save(gcn, path)                                               # the whole module, pickled
    assert accuracy(kiln.load(path, weights_only=False), features, labels, adj_mat, idx_test) == test_acc
    return test_acc


if __name__ == "__main__":
    main()
