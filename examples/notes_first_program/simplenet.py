# The notes' first program (SimpleNet on MNIST, SGD, the epoch loss as
# running_loss / len(train_loader), the loss curve), changed only where it
# must run here: the data come from the IDX files of data/mnist (no
# download), the device is the CPU, EPOCHS and the output files come from
# the command line, and the curve is written as a CSV in the columns of our
# --metrics (for `cddpc plot`) instead of plt.show().
#
#   python3 simplenet.py DATA_DIR METRICS.csv [EPOCHS]
import csv
import gzip
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset

BATCH_SIZE = 64
EPOCHS = int(sys.argv[3]) if len(sys.argv) > 3 else 10
LR = 0.01
device = torch.device("cpu")
torch.manual_seed(3407)


def idx(path):
    """An IDX file (plain or .gz) as a numpy array."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def find(d, name):
    for n in (name, name + ".gz"):
        if os.path.exists(os.path.join(d, n)):
            return os.path.join(d, n)
    sys.exit("no %s in %s" % (name, d))


# 1. data: ToTensor() then Normalize((0.1307,), (0.3081,)), as the notes
x = torch.from_numpy(idx(find(sys.argv[1], "train-images-idx3-ubyte")).astype(np.float32) / 255.0)
x = ((x - 0.1307) / 0.3081).unsqueeze(1)
y = torch.from_numpy(idx(find(sys.argv[1], "train-labels-idx1-ubyte")).astype(np.int64))
train_loader = DataLoader(dataset=TensorDataset(x, y), batch_size=BATCH_SIZE, shuffle=True)


# 2. the network
class SimpleNet(nn.Module):
    def __init__(self):
        super(SimpleNet, self).__init__()
        self.fc1 = nn.Linear(28 * 28, 512)
        self.fc2 = nn.Linear(512, 256)
        self.fc3 = nn.Linear(256, 10)
        self.relu = nn.ReLU()

    def forward(self, x):
        x = x.view(-1, 28 * 28)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        x = self.fc3(x)
        return x


model = SimpleNet().to(device)
# 3. loss and optimizer
criterion = nn.CrossEntropyLoss()
optimizer = optim.SGD(model.parameters(), lr=LR)
epoch_losses = []
# 4. the training loop
for epoch in range(EPOCHS):
    model.train()
    running_loss = 0.0
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        outputs = model(data)
        loss = criterion(outputs, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
    epoch_loss = running_loss / len(train_loader)
    epoch_losses.append(epoch_loss)
    print(f'Epoch [{epoch+1}/{EPOCHS}], Loss: {epoch_loss:.4f}')
# 5. the curve, as rows `cddpc plot` reads
with open(sys.argv[2], "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["epoch", "train_loss"])
    for e, l in enumerate(epoch_losses):
        w.writerow([e + 1, "%.9g" % l])
