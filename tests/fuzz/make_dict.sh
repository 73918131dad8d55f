#!/bin/sh
# tests/fuzz/make_dict.sh: the fuzzer's dictionary, read from the compiler's
# own tables rather than written by hand, so a new layer, function, loss or
# train key is in it as soon as it is in the compiler: every string literal
# of the lexer, parser and semantic tables that is a word (Linear, relu,
# in_features, torch.nn.) and every token the lexer matches literally.
# Prints libFuzzer's dictionary format on stdout.
set -eu
cd "$(dirname "$0")/../.."
{
    # words: "Linear", "in_features", "torch.nn." ...
    cat compiler/lex.l compiler/parse.y compiler/layers.c compiler/forward.c compiler/train_block.c compiler/front.c \
        compiler/loss_fns.c compiler/tensor_ints.c |
        grep -o '"[A-Za-z_][A-Za-z0-9_.]*"'
    # the lexer's literal tokens: "//" and each of [{}()\[\],=:+*/-]
    grep -o '^"[^A-Za-z"]*"' compiler/lex.l
    for c in '{' '}' '(' ')' '[' ']' ',' '=' ':' '+' '*' '/' '-' '#' "'" '\"' '\x0A' '.'; do
        printf '"%s"\n' "$c"
    done
    # the shapes' and numbers' forms, and the edges of the limits (int64,
    # float32, MAX_DIM, MAX_PARAM_ELEMS) where overflows hide
    printf '"%s"\n' 'f32[N, 1, 28, 28]' 'f32[N, 784]' '1e-3' '0.5' '-1' '28' '784' \
        '9223372036854775807' '16777216' '2147483648' '3.4e38' '1e39' '1e-40' '1e308' '1e-320'
} | sort -u
