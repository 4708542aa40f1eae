"""Datasets, samplers and the DataLoader, with PyTorch's names (``torch.utils.data`` -> ``kiln.utils.data``).

>>> from kiln.utils.data import DataLoader, TensorDataset, random_split
>>> train, val = random_split(TensorDataset(x, y), [0.9, 0.1], generator=kiln.Generator(0))
>>> for xb, yb in DataLoader(train, batch_size=64, shuffle=True, num_workers=2): ...
"""
from . import dataloader, dataset, sampler
from .collate import default_collate, default_convert
from .dataloader import DataLoader
from .dataset import (ChainDataset, ConcatDataset, Dataset, IterableDataset, Subset, TensorDataset,
                      random_split)
from .sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler,
                      WeightedRandomSampler)
from .worker import WorkerInfo, get_worker_info

__all__ = ["BatchSampler", "ChainDataset", "ConcatDataset", "DataLoader", "Dataset", "IterableDataset",
           "RandomSampler", "Sampler", "SequentialSampler", "Subset", "SubsetRandomSampler", "TensorDataset",
           "WeightedRandomSampler", "WorkerInfo", "dataloader", "dataset", "default_collate", "default_convert",
           "get_worker_info", "random_split", "sampler"]
