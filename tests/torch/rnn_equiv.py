#!/usr/bin/python3
"""PyTorch equivalence of the recurrent layers (tests/torch/lstm_rows.net,
lstm_seq.net, gru_bi.net, rnn_relu.net).

usage: rnn_equiv.py PROGRAM DATA_DIR lstm|lstm_seq|gru|seq2seq|rnn

As the other equivalence tests (the driver is equiv.py): PyTorch trains
the same network, 100 steps of SGD with momentum and the model file's
gradient clipping (clip_grad_norm_, or for rnn clip_grad_value_), from
the same weights on the same batches (the image's
28 rows as 28 steps); every step's loss within 1e-4, the final parameters
too. The oracle is nn.LSTM / nn.GRU / nn.RNN. The controls run the same
parameters through a cell written out here with one thing changed, and
must not match:
  lstm      the input and forget gates swapped; the first step's output
            read instead of the last; no clipping
  lstm_seq  the first step's output (out[0]) read instead of the last;
            the forget gate's input taken from the cell gate's slot; no
            gradient through the last cell state c_n (which it classifies)
  gru       the reset gate applied before the hidden product (the other
            GRU); the reverse direction run forward
  seq2seq   (an encoder's final state starting two decoders) no gradient
            into the encoder through that state; none through c0
  rnn       tanh instead of relu; the initial state zero
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import equiv  # noqa: E402

STEPS = 100


def cell_step(kind, variant, x_t, h, c, w_ih, w_hh, b_ih, b_hh):
    """one step of a cell written out (PyTorch's formulas unless variant
    changes one): x_t [N, F], h and c [N, H]"""
    gi = x_t @ w_ih.t() + (b_ih if b_ih is not None else 0)
    gh = h @ w_hh.t() + (b_hh if b_hh is not None else 0)
    if kind == "lstm":
        i, f, g, o = (gi + gh).chunk(4, 1)
        if variant == "swap":
            i, f = f, i
        if variant == "slot":
            f = g
        i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
        c = f * c + i * g
        return o * c.tanh(), c
    if kind == "gru":
        ir, iz, inn = gi.chunk(3, 1)
        hr, hz, hn = gh.chunk(3, 1)
        r, z = (ir + hr).sigmoid(), (iz + hz).sigmoid()
        if variant == "reset_before":   # n = tanh(W_in x + b_in + W_hn (r h) + b_hn)
            hn = (r * h) @ w_hh.t()[:, 2 * h.size(1):] + (b_hh[2 * h.size(1):] if b_hh is not None else 0)
            n = (inn + hn).tanh()
        else:
            n = (inn + r * hn).tanh()
        return (1 - z) * n + z * h, c
    a = gi + gh
    return (a.tanh() if variant == "tanh" else a.relu()), c


def run_layer(mod, kind, variant, x, h0, layer, reverse):
    """one layer and direction of mod (nn.LSTM/GRU/RNN) written out over
    x [N, T, F] from h0 [N, H]: [N, T, H]"""
    sfx = "_l%d%s" % (layer, "_reverse" if reverse else "")
    w_ih, w_hh = getattr(mod, "weight_ih" + sfx), getattr(mod, "weight_hh" + sfx)
    b_ih = getattr(mod, "bias_ih" + sfx, None)
    b_hh = getattr(mod, "bias_hh" + sfx, None)
    T = x.size(1)
    h, c = h0, torch.zeros_like(h0)
    order = range(T - 1, -1, -1) if reverse and variant != "forward" else range(T)
    out = [None] * T
    for t in order:
        h, c = cell_step(kind, variant, x[:, t], h, c, w_ih, w_hh, b_ih, b_hh)
        out[t] = h
    return torch.stack(out, 1), h, c


class Net(nn.Module):
    def __init__(self, which, variant):
        super().__init__()
        self.which, self.variant = which, variant
        if which == "lstm":
            self.lstm = nn.LSTM(28, 32, num_layers=2, batch_first=True)
            self.fc = nn.Linear(32, 10)
        elif which == "lstm_seq":
            self.lstm = nn.LSTM(28, 24, bias=False)
            self.fc = nn.Linear(48, 10)
        elif which == "gru":
            self.gru = nn.GRU(28, 20, batch_first=True, bidirectional=True)
            self.fc = nn.Linear(40, 10)
        elif which == "seq2seq":
            self.enc = nn.LSTM(28, 24, batch_first=True)
            self.dec = nn.LSTM(28, 24, batch_first=True)
            self.gru = nn.GRU(28, 24, batch_first=True)
            self.fc = nn.Linear(48, 10)
        else:
            self.rnn = nn.RNN(28, 32, nonlinearity="relu", batch_first=True)
            self.fc = nn.Linear(32, 10)

    def written(self, mod, kind, x, layers, dirs, h0, cells=False):
        """mod run through the cells above (x [N, T, F]): the output and
        h_n (c_n when cells)"""
        hn = []
        for k in range(layers):
            outs = []
            for d in range(dirs):
                o, h, c = run_layer(mod, kind, self.variant, x, h0, k, d == 1)
                outs.append(o)
                hn.append(c if cells else h)
            x = torch.cat(outs, 2)
        return x, torch.stack(hn, 0)

    def forward(self, x):
        B = x.size(0)
        r = x.view(B, 28, 28)
        v = self.variant
        if self.which == "lstm":
            if v in ("swap",):
                out, _ = self.written(self.lstm, "lstm", r, 2, 1, r.new_zeros(B, 32))
            else:
                out, _ = self.lstm(r)
            return self.fc(out[:, 0 if v == "first" else -1, :])
        if self.which == "lstm_seq":
            if v == "slot":
                out, c_n = self.written(self.lstm, "lstm", r, 1, 1, r.new_zeros(B, 24), cells=True)
                return self.fc(torch.cat([out[:, -1], c_n[0]], dim=1))
            out, (_, c_n) = self.lstm(r.transpose(0, 1))
            c = c_n[0].detach() if v == "cn_const" else c_n[0]
            return self.fc(torch.cat([out[0 if v == "first" else -1], c], dim=1))
        if self.which == "gru":
            if v in ("reset_before", "forward"):
                _, h_n = self.written(self.gru, "gru", r, 1, 2, r.new_zeros(B, 20))
            else:
                _, h_n = self.gru(r)
            return self.fc(torch.cat([h_n[0], h_n[1]], dim=1))
        if self.which == "seq2seq":
            _, (h, c) = self.enc(r[:, :14])
            if v == "detached":     # no gradient into the encoder through its state
                h, c = h.detach(), c.detach()
            if v == "no_c":         # the decoder's c0's gradient left out
                c = c.detach()
            out, _ = self.dec(r[:, 14:], (h, c))
            g, _ = self.gru(r[:, 14:], h)
            return self.fc(torch.cat([out[:, -1], g[:, -1]], dim=1))
        h0 = torch.zeros(1, B, 32) + (0.0 if v == "zero_h0" else 0.1)
        if v == "tanh":
            _, h_n = self.written(self.rnn, "rnn", r, 1, 1, h0[0])
        else:
            _, h_n = self.rnn(r, h0)
        return self.fc(h_n[0])


CASES = {
    "lstm": (0.05, 1.0, [("swap", "the input and forget gates swapped"),
                         ("first", "the first step's output read instead of the last"),
                         ("noclip", "no gradient clipping")]),
    "lstm_seq": (0.02, 1.0, [("first", "the first step (out[0]) read instead of the last"),
                             ("slot", "the forget gate read from the cell gate's slot"),
                             ("cn_const", "no gradient through c_n")]),
    "gru": (0.05, 1.0, [("reset_before", "the reset gate applied before the hidden product"),
                        ("forward", "the reverse direction run forward")]),
    "seq2seq": (0.02, 1.0, [("detached", "no gradient into the encoder through its final state"),
                            ("no_c", "no gradient through the decoder's c0")]),
    "rnn": (0.02, ("value", 0.02), [("tanh", "tanh instead of relu"), ("zero_h0", "the initial state zero"),
                                    ("noclip", "no gradient clipping")]),
}


def main(argv):
    if len(argv) != 3 or argv[2] not in CASES:
        sys.stderr.write(__doc__)
        return 2
    which = argv[2]
    lr, clip, controls = CASES[which]
    return equiv.run(argv[:2], "rnn_equiv_" + which, which, lambda v: Net(which, v), STEPS, lr, controls,
                     doc=__doc__, clip=clip)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
