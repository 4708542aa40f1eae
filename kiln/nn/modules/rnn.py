"""``kiln.nn.modules.rnn``: the classes PyTorch defines in ``torch.nn.modules.rnn``."""
from ..rnn import GRU, LSTM, RNN, RNNBase
from ..rnn_cell import GRUCell, LSTMCell, RNNCell, RNNCellBase

__all__ = ["GRU", "GRUCell", "LSTM", "LSTMCell", "RNN", "RNNBase", "RNNCell", "RNNCellBase"]
