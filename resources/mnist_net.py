"""A small MNIST ConvNet (the checkpointing example's, without its checkpoint call), memledger's training-step demo.

python3 mnist_net.py OUT.pt writes it as TorchScript with float16 weights (the demo is recorded in float32:
the load tax shows too). Input: a batch of 64 1x28x28 images; 10 classes.
"""
import sys

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = nn.functional.relu(self.conv1(x))
        x = nn.functional.max_pool2d(x, 2)
        x = self.conv2(x)
        x = nn.functional.max_pool2d(x, 2)
        x = x.view(-1, 64 * 7 * 7)
        x = nn.functional.relu(self.fc1(x))
        x = self.fc2(x)
        return x


if __name__ == "__main__":
    torch.manual_seed(3)
    torch.jit.save(torch.jit.script(Net()).half(), sys.argv[1] if len(sys.argv) > 1 else "demo_mnist.pt")
