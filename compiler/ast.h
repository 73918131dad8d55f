/* ast.h: the syntax tree shared by lex.l, parse.y and the front end (sema.h).
 *
 * The tree is exactly what was written, with a Loc on every node, and no
 * meaning yet: which names are layers, functions or variables, and every
 * type and shape check, is sema's job. That keeps the grammar small and
 * lets sema word its errors in the model's own terms. All nodes live in
 * the compilation's arena (util_alloc) and are never freed. */
#ifndef AST_H
#define AST_H

#include "cddpc.h"

typedef struct Expr Expr;

typedef enum {
    E_INT,      /* 784            i (and f, so ints pass where floats go) */
    E_FLOAT,    /* 1e-3           f */
    E_STR,      /* "data/mnist"   s */
    E_BOOL,     /* true / false   i */
    E_NAME,     /* mean, x, fc1   s */
    E_CALL,     /* s(args)        s, args */
    E_TUPLE,    /* (a, b), [a, b] args, all positional */
    E_NEG,      /* -a             a */
    E_ADD,      /* a + b          a, b; loc is the '+' */
    E_SUB,      /* a - b          a, b; loc is the operator (so for the rest) */
    E_MUL,      /* a * b */
    E_DIV,      /* a / b          true division, as Python's */
    E_FDIV,     /* a // b         floor division */
    E_MOD,      /* a % b          Python's remainder (the divisor's sign) */
    E_MATMUL,   /* a @ b */
    E_POW,      /* a ** b */
    E_CMP,      /* a > b, a == b, ...: i the operator: '>', 'G' (>=), '<', 'L' (<=), '=' (==), '!' (!=) */
    E_AND,      /* a & b          logical, of booleans */
    E_OR,       /* a | b */
    E_NOT,      /* ~a             a */
    E_INDEX,    /* a[args]        args: E_SLICE, E_ELLIPSIS or index expressions */
    E_SLICE,    /* a:b:c          a, b, c, each NULL when left out */
    E_ELLIPSIS, /* ... */
    E_COMP,     /* [a for s in b]  a list comprehension: a the element, s the name, b range(n) */
    E_COND,     /* a if b else c  Python's conditional expression; loc is the 'if' */
} ExprKind;

/* One argument: `key = val`, or positional when key is NULL. */
typedef struct Arg {
    const char *key;
    Loc key_loc;
    Expr *val;
} Arg;

struct Expr {
    ExprKind kind;
    Loc loc;
    int64_t i;
    double f;
    const char *s;
    const char *written;    /* E_NAME, E_CALL: the name as written (nn.Linear,
                               x.view), s without its PyTorch namespace */
    Expr *a, *b, *c;
    Arg **args;
    int nargs;
    int depth;              /* operations and calls nested in it, itself included (parse.y's limit) */
};

/* One dimension of a tensor type: a number, or a name (only N is valid). */
typedef struct Dim {
    Loc loc;
    int64_t val;
    const char *name;       /* non-NULL for a named dimension */
} Dim;

/* f32[N, 1, 28, 28] */
typedef struct TypeExpr {
    Loc loc;
    const char *dtype;
    Dim **dims;
    int ndims;
} TypeExpr;

typedef enum { S_ASSIGN, S_RETURN, S_FOR } StmtKind;

typedef struct Stmt {
    StmtKind kind;
    Loc loc;
    const char *name;       /* S_ASSIGN target */
    const char **names;     /* S_ASSIGN to a tuple (a, b = ...): its names, name NULL */
    Loc *name_locs;
    int nnames;
    int *outer;             /* ... each name's element of the tuple: out, (h, c) = ... gives 0, 1, 1 */
    int nested;             /* ... a pair in parentheses among the names */
    Expr *val;              /* S_FOR: what it iterates (a ModuleList, Sequential); name the variable */
    struct Stmt **body;     /* S_FOR: the statements it repeats, unrolled */
    int nbody;
} Stmt;

/* forward(x: T) { body }. The Sequential form `model M(x: T) = e` has the
 * same input but no body. */
typedef struct Forward {
    Loc loc;
    const char *param;
    Loc param_loc;
    TypeExpr *type;
    Stmt **body;
    int nbody;
    Loc end;                /* the closing '}', for "does not return" */
} Forward;

/* name = Constructor(args) inside a model block. */
typedef struct LayerDecl {
    Loc loc;
    const char *name;
    Expr *init;
} LayerDecl;

typedef struct Model {
    Loc loc;                /* the model's name */
    const char *name;
    /* model Block(n_embd, n_head = 4) { ... }: a block, made inside another
     * model with these arguments (numbers); nparams -1: no parameter list */
    const char **params;
    Expr **defaults;        /* [nparams]: NULL where none */
    int nparams;
    LayerDecl **layers;
    int nlayers;
    Forward **fwd;          /* all forward()s written; sema wants exactly one */
    int nfwd;
    Expr *seq;              /* Sequential form: the body expression, else NULL */
} Model;

typedef struct TrainItem {
    Loc loc;                /* the key */
    const char *key;
    Expr *val;              /* a block's: its parameters, (out, y) */
    struct Stmt **body;     /* loss(out, y) { ... }: the block's statements */
    int nbody, has_body;
    Loc end;                /* the block's closing '}' */
} TrainItem;

typedef struct Train {
    Loc loc;
    TrainItem **items;
    int nitems;
} Train;

typedef struct File {
    Model **models;
    int nmodels;
    Train **trains;
    int ntrains;
} File;

/* What the scanner and the parser share through yyextra. */
typedef struct ParseState {
    const char *file;
    int col;                /* column of the next character, 1-based */
    int end_line, end_col;  /* just past the last token: where EOF is reported */
    const char *last_text;  /* text of the last token, for syntax errors */
    File *ast;
} ParseState;

/* parse.y: parses text (named path in diagnostics). Returns the tree, or
 * NULL after reporting a syntax error. Lexical errors are reported and
 * skipped, so the tree may be returned with diag_count() > 0. */
File *parse_file(const char *path, const char *text);

/* lex.l: a scanner over text for the parser (yylex), and its end; the
 * parser calls the scanner, never the other way round. */
void *lex_open(ParseState *st, const char *text);
void lex_close(void *scanner);

#endif
