#!/bin/sh
# tests/cli/pytorch_train_names.sh CDDPC: the train block in PyTorch's own
# words (nn.CrossEntropyLoss(weight = torch.tensor([...])),
# torch.optim.Adam(model.parameters(), lr = ...),
# torch.optim.lr_scheduler.StepLR(optimizer, step_size = ...), optim.SGD,
# lr_scheduler.CosineAnnealingLR, ...) compiles to exactly the program the
# train block's own spelling does: the C cddpc emits for the two files is
# the same text, line for line (the source path aside). A name PyTorch has
# and cddpc does not (optim.LBFGS) is refused listing both spellings.
set -u
[ $# -ge 1 ] || { echo "usage: $0 CDDPC" >&2; exit 2; }
CDDPC=$1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail=0 n=0

net() { # FILE INPUT OUTPUTS LOSS OPTIMIZER SCHEDULE
    cat > "$1" <<EOF
model Net {
    fc1 = nn.Linear($2, 16)
    fc2 = nn.Linear(16, $3)

    forward(x: f32[N, $2]) {
        return $7(self.fc2(torch.tanh(self.fc1(x))))
    }
}

train {
    model     Net
    data      csv("t.csv", target = "y")
    loss      $4
    optimizer $5
    schedule  $6
    batch     8
}
EOF
}

same() { # NAME INPUT OUTPUTS OURS_LOSS OURS_OPT OURS_SCHED PT_LOSS PT_OPT PT_SCHED [HEAD]
    name=$1
    n=$((n + 1))
    net "$W/a.net" "$2" "$3" "$4" "$5" "$6" "${10:-}"
    net "$W/b.net" "$2" "$3" "$7" "$8" "$9" "${10:-}"
    if ! "$CDDPC" "$W/a.net" --emit c "$W/a" > "$W/a.out" 2>&1; then
        echo "FAIL $name: the train block's own spelling does not compile:"; cat "$W/a.out"; fail=1; return
    fi
    if ! "$CDDPC" "$W/b.net" --emit c "$W/b" > "$W/b.out" 2>&1; then
        echo "FAIL $name: PyTorch's spelling does not compile:"; cat "$W/b.out"; fail=1; return
    fi
    grep -v '\.source = ' "$W/a/program.c" > "$W/a.c"
    grep -v '\.source = ' "$W/b/program.c" > "$W/b.c"
    if cmp -s "$W/a.c" "$W/b.c"; then
        echo "ok   $name: $(wc -l < "$W/a.c") lines of C, the same"
    else
        echo "FAIL $name: the two spellings compile to different programs:"
        diff "$W/a.c" "$W/b.c" | head -20
        fail=1
    fi
}

same ce_adam_step 8 4 \
    "cross_entropy(weight = [1.0, 2.0, 0.5, 1.0], label_smoothing = 0.1)" "adam(lr = 0.001, weight_decay = 0.01)" \
    "step(step_size = 2, gamma = 0.5)" \
    "nn.CrossEntropyLoss(weight = torch.tensor([1.0, 2.0, 0.5, 1.0]), label_smoothing = 0.1)" \
    "torch.optim.Adam(model.parameters(), lr = 0.001, weight_decay = 0.01)" \
    "torch.optim.lr_scheduler.StepLR(optimizer, step_size = 2, gamma = 0.5)"
same mse_sgd_cosine 8 1 "mse_loss(reduction = sum)" "sgd(lr = 0.1, momentum = 0.9, nesterov = true)" \
    "cosine(T_max = 10, eta_min = 0.001)" \
    "nn.MSELoss(reduction = 'sum')" "optim.SGD(model.parameters(), lr = 0.1, momentum = 0.9, nesterov = True)" \
    "lr_scheduler.CosineAnnealingLR(optimizer, T_max = 10, eta_min = 0.001)"
same bce_adamw_multistep 8 3 "binary_cross_entropy_with_logits(pos_weight = [2.0, 1.0, 0.5])" \
    "adamw(lr = 0.01)" "multistep(milestones = [2, 4], gamma = 0.5)" \
    "nn.BCEWithLogitsLoss(pos_weight = torch.tensor([2.0, 1.0, 0.5]))" "torch.optim.AdamW(params, lr = 0.01)" \
    "MultiStepLR(opt, milestones = [2, 4], gamma = 0.5)"
same smoothl1_rmsprop_exp 8 2 "smooth_l1_loss(beta = 0.5)" "rmsprop(lr = 0.01, alpha = 0.9)" \
    "exponential(gamma = 0.9)" \
    "nn.SmoothL1Loss(beta = 0.5)" "torch.optim.RMSprop(model.parameters(), lr = 0.01, alpha = 0.9)" \
    "torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma = 0.9)"
same huber_onecycle 8 2 "huber_loss(delta = 2.0)" "sgd(lr = 0.1)" "onecycle(max_lr = 0.1, cycle_momentum = false)" \
    "nn.HuberLoss(delta = 2.0)" "optim.SGD(model.parameters(), lr = 0.1)" \
    "lr_scheduler.OneCycleLR(optimizer, max_lr = 0.1, cycle_momentum = False)"
same l1_adagrad 8 2 "l1_loss()" "adagrad(lr = 0.02, lr_decay = 0.01)" "step(step_size = 1)" \
    "nn.L1Loss()" "optim.Adagrad(model.parameters(), lr = 0.02, lr_decay = 0.01)" \
    "lr_scheduler.StepLR(optimizer, step_size = 1)"
same nll 8 4 "nll_loss(ignore_index = 3)" "sgd(lr = 0.1)" "step(step_size = 1)" \
    "nn.NLLLoss(ignore_index = 3)" "optim.SGD(model.parameters(), lr = 0.1)" "lr_scheduler.StepLR(optimizer, step_size = 1)" \
    "F.log_softmax"

# refused, naming PyTorch's spellings too
net "$W/c.net" 8 4 "nn.CrossEntropyLoss()" "optim.LBFGS(model.parameters(), lr = 0.01)" "step(step_size = 1)" ""
if "$CDDPC" "$W/c.net" -o "$W/c" > "$W/c.out" 2>&1; then
    echo "FAIL: optim.LBFGS compiled"; fail=1
elif grep -q "unknown optimizer 'LBFGS'" "$W/c.out" && grep -q "torch.optim.Adagrad, Adam, AdamW, RMSprop, SGD" "$W/c.out"; then
    echo "ok   optim.LBFGS refused: $(grep -o "unknown optimizer[^(]*" "$W/c.out")"
else
    echo "FAIL: optim.LBFGS's message:"; cat "$W/c.out"; fail=1
fi
[ $fail -eq 0 ] || exit 1
echo "pytorch-train-names: PASS: $n pairs compile to the same program"
