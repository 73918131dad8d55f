/* parse.y: the grammar of .net model files -> AST (ast.h).
 *
 * A pure, reentrant parser with locations: no globals, so the compiler
 * could parse several files in one run and tests can call it repeatedly.
 * The grammar only builds the tree; names and shapes are checked in sema.c,
 * which can word errors far better than a parser can. LAC keeps the list of
 * expected tokens in syntax errors exact despite LALR's default reductions.
 * Nodes are arena-allocated, so no %destructor is needed: nothing dropped
 * during error recovery would ever be freed anyway. */

%define api.pure full
%locations
%expect 0
%define parse.error custom
%define parse.lac full

%code requires {
#include "ast.h"
#ifndef YY_TYPEDEF_YY_SCANNER_T
#define YY_TYPEDEF_YY_SCANNER_T
typedef void *yyscan_t;
#endif
/* A growing array of tree nodes, copied into the typed fields. */
typedef struct List {
    void **v;
    int n;
} List;
}

%code {
#include <string.h>

int yylex(YYSTYPE *lval, YYLTYPE *lloc, yyscan_t scanner);
static void yyerror(YYLTYPE *lloc, yyscan_t scanner, ParseState *P, const char *msg);

#define L(yl) ((Loc){P->file, (yl).first_line, (yl).first_column})

/* Capacity is always the next power of two, so no field is needed. */
static void push(List *l, void *x)
{
    if ((l->n & (l->n - 1)) == 0)
        l->v = util_grow(l->v, sizeof *l->v * (size_t)l->n, sizeof *l->v * (size_t)(l->n ? 2 * l->n : 1));
    l->v[l->n++] = x;
}

static Expr *mk(ExprKind kind, Loc loc)
{
    Expr *e = util_alloc(sizeof *e);
    e->kind = kind;
    e->loc = loc;
    return e;
}

/* the names of a pair in parentheses among a tuple's names, marked i = 1, 2 */
static void push_pair(List *l, const char *a, Loc la, const char *b, Loc lb)
{
    Expr *v = mk(E_NAME, la), *w = mk(E_NAME, lb);
    v->s = a, v->i = 1;
    w->s = b, w->i = 2;
    push(l, v);
    push(l, w);
}

/* Sema and the folding of constants walk an expression recursively, so its
 * depth is bounded here: a chain of 300000 '+' (which the parser reduces as
 * it goes, its own stack staying small) overflowed the C stack. Reported
 * once, where the expression crosses the limit. */
enum { MAX_EXPR_DEPTH = 1000 };

static Expr *nest(ParseState *P, Expr *e)
{
    int d = 0;
    if (e->a && e->a->depth > d)
        d = e->a->depth;
    if (e->b && e->b->depth > d)
        d = e->b->depth;
    if (e->c && e->c->depth > d)
        d = e->c->depth;
    for (int k = 0; k < e->nargs; k++)
        if (e->args[k]->val->depth > d)
            d = e->args[k]->val->depth;
    e->depth = d + 1;
    if (e->depth == MAX_EXPR_DEPTH + 1)
        diag_error(e->loc, "expression nested too deeply (more than %d operations and calls inside one another)",
                   MAX_EXPR_DEPTH);
    return e;
}

static Arg *mkarg(const char *key, Loc key_loc, Expr *val)
{
    Arg *a = util_alloc(sizeof *a);
    a->key = key;
    a->key_loc = key_loc;
    a->val = val;
    return a;
}

/* A PyTorch name without its namespace: nn.Linear, torch.nn.Linear ->
 * Linear; F.relu, torch.nn.functional.relu, torch.flatten -> relu,
 * flatten; torch.optim.SGD -> SGD; self.fc1 -> fc1 (a layer of the model, as
 * PyTorch's attribute).
 * Sema words its messages about the name as written (Expr.written). */
static const char *pyname(const char *s)
{
    static const char *const spaces[] = {"torch.nn.functional.", "nn.functional.", "torch.nn.",
                                         "torch.optim.lr_scheduler.", "optim.lr_scheduler.", "torch.optim.",
                                         "lr_scheduler.", "torch.", "nn.", "optim.", "F.", "self."};
    for (size_t i = 0; i < sizeof spaces / sizeof *spaces; i++)
        if (strncmp(s, spaces[i], strlen(spaces[i])) == 0)
            return s + strlen(spaces[i]);
    return s;
}

/* A call: x.view(a, b) is the method of a tensor, view(x, a, b) (as
 * torch.Tensor.view is torch.view's); a namespace is dropped (pyname). The
 * receiver is the part before the last dot once the namespace is gone. */
static Expr *method(Expr *e, const char *name, List args)
{
    const char *s = pyname(name), *dot = strrchr(s, '.');
    e->written = name;
    e->s = s;
    e->args = (Arg **)args.v;
    e->nargs = args.n;
    if (!dot)
        return e;
    Expr *self = mk(E_NAME, e->loc);
    self->s = self->written = util_fmt("%.*s", (int)(dot - s), s);
    List l = {0};
    push(&l, mkarg(NULL, self->loc, self));
    for (int k = 0; k < args.n; k++)
        push(&l, args.v[k]);
    e->s = dot + 1;
    e->args = (Arg **)l.v;
    e->nargs = l.n;
    return e;
}
}

%param {yyscan_t scanner}
%parse-param {ParseState *P}

%union {
    int64_t i;
    double f;
    const char *s;
    Expr *e;
    Arg *arg;
    List l;
    Model *m;
    Forward *fwd;
    TypeExpr *type;
    Dim *dim;
    Stmt *stmt;
    Train *train;
    TrainItem *titem;
}

%token <s> IDENT "identifier"
%token <s> STRING "string"
%token <i> INT "integer"
%token <f> FLOAT "number"
%token MODEL "'model'" FORWARD "'forward'" RETURN "'return'" TRAIN "'train'" FOR "'for'" IN "'in'"
%token IF "'if'" ELSE "'else'"
%token TRUE "'true'" FALSE "'false'"
%token FDIV "'//'"
%token POW "'**'"
%token <i> AUGEQ "an augmented assignment (+=)"
%token <i> CMP "a comparison"
%token ELLIPSIS "'...'"

%type <e> expr cmpx orx andx arith term unary power primary sub oexpr
%type <arg> arg
%type <l> args arglist exprs dims stmts titems subs names mparams
%type <m> model members
%type <fwd> forward input tinput
%type <type> type
%type <dim> dim
%type <stmt> stmt
%type <train> train
%type <titem> titem

%%

/* file: { model | train } */
file:
    %empty          { P->ast = util_alloc(sizeof *P->ast); }
  | file model      { File *f = P->ast; List l = {(void **)f->models, f->nmodels}; push(&l, $2);
                      f->models = (Model **)l.v; f->nmodels = l.n; }
  | file train      { File *f = P->ast; List l = {(void **)f->trains, f->ntrains}; push(&l, $2);
                      f->trains = (Train **)l.v; f->ntrains = l.n; }
  ;

/* model: 'model' IDENT '{' members '}'
 *      | 'model' IDENT '(' input ')' '=' expr      (Sequential form) */
model:
    MODEL IDENT '{' members '}'     { $$ = $4; $$->name = $2; $$->loc = L(@2); $$->nparams = -1; }
  | MODEL IDENT '(' mparams ')' '{' members '}'
                    { $$ = $7; $$->name = $2; $$->loc = L(@2); $$->nparams = $4.n;
                      $$->params = util_alloc(sizeof *$$->params * (size_t)($4.n + 1));
                      $$->defaults = util_alloc(sizeof *$$->defaults * (size_t)($4.n + 1));
                      for (int k = 0; k < $4.n; k++) {
                          const Arg *a = $4.v[k];
                          $$->params[k] = a->key;
                          $$->defaults[k] = a->val;
                      } }
  | MODEL IDENT '(' tinput ')' '=' expr
                    { $$ = util_alloc(sizeof *$$); $$->name = $2; $$->loc = L(@2); $$->nparams = -1;
                      $$->fwd = util_alloc(sizeof *$$->fwd); $$->fwd[0] = $4; $$->nfwd = 1; $$->seq = $7; }
  ;

/* members: { IDENT '=' expr | IDENT '(' args ')' | forward } */
members:
    %empty          { $$ = util_alloc(sizeof *$$); }
  | members IDENT '=' expr
                    { LayerDecl *d = util_alloc(sizeof *d); d->name = pyname($2); d->loc = L(@2); d->init = $4;
                      List l = {(void **)$1->layers, $1->nlayers}; push(&l, d);
                      $$ = $1; $$->layers = (LayerDecl **)l.v; $$->nlayers = l.n; }
  | members IDENT '(' args ')'
                    { /* self.register_buffer("mask", torch.tril(...)): a member named by its first argument */
                      LayerDecl *d = util_alloc(sizeof *d); d->loc = L(@2);
                      d->init = nest(P, method(mk(E_CALL, L(@2)), $2, $4));
                      List l = {(void **)$1->layers, $1->nlayers}; push(&l, d);
                      $$ = $1; $$->layers = (LayerDecl **)l.v; $$->nlayers = l.n; }
  | members forward { List l = {(void **)$1->fwd, $1->nfwd}; push(&l, $2);
                      $$ = $1; $$->fwd = (Forward **)l.v; $$->nfwd = l.n; }
  ;

/* mparams: [ IDENT [ '=' expr ] { ',' IDENT [ '=' expr ] } ]   (a block's constructor) */
mparams:
    %empty          { $$ = (List){0}; }
  | IDENT           { $$ = (List){0}; push(&$$, mkarg($1, L(@1), NULL)); }
  | IDENT '=' expr  { $$ = (List){0}; push(&$$, mkarg($1, L(@1), $3)); }
  | mparams ',' IDENT
                    { $$ = $1; push(&$$, mkarg($3, L(@3), NULL)); }
  | mparams ',' IDENT '=' expr
                    { $$ = $1; push(&$$, mkarg($3, L(@3), $5)); }
  ;

/* forward: 'forward' '(' input ')' '{' { stmt } '}' */
forward:
    FORWARD '(' input ')' '{' stmts '}'
                    { $$ = $3; $$->loc = L(@1); $$->body = (Stmt **)$6.v; $$->nbody = $6.n; $$->end = L(@7); }
  ;

/* input: IDENT ':' type | IDENT   (a block's forward takes what its caller gives) */
input:
    tinput
  | IDENT           { $$ = util_alloc(sizeof *$$); $$->loc = L(@1); $$->param = $1; $$->param_loc = L(@1); }
  ;

tinput:
    IDENT ':' type  { $$ = util_alloc(sizeof *$$); $$->loc = L(@1); $$->param = $1; $$->param_loc = L(@1);
                      $$->type = $3; }
  ;

/* type: IDENT '[' dim { ',' dim } ']' */
type:
    IDENT '[' dims ']'
                    { $$ = util_alloc(sizeof *$$); $$->loc = L(@1); $$->dtype = $1;
                      $$->dims = (Dim **)$3.v; $$->ndims = $3.n; }
  ;

dims:
    dim             { $$ = (List){0}; push(&$$, $1); }
  | dims ',' dim    { $$ = $1; push(&$$, $3); }
  ;

dim:
    INT             { $$ = util_alloc(sizeof *$$); $$->loc = L(@1); $$->val = $1; }
  | IDENT           { $$ = util_alloc(sizeof *$$); $$->loc = L(@1); $$->name = $1; }
  ;

/* names: a pair in parentheses is one element of the tuple unpacked
 * (out, (h, c) = self.lstm(x)): its names carry i = 1 and 2 */
names:
    IDENT ','       { $$ = (List){0}; Expr *v = mk(E_NAME, L(@1)); v->s = $1; push(&$$, v); }
  | names IDENT     { $$ = $1; Expr *v = mk(E_NAME, L(@2)); v->s = $2; push(&$$, v); }
  | names IDENT ',' { $$ = $1; Expr *v = mk(E_NAME, L(@2)); v->s = $2; push(&$$, v); }
  | names '(' IDENT ',' IDENT ')'
                    { $$ = $1; push_pair(&$$, $3, L(@3), $5, L(@5)); }
  | names '(' IDENT ',' IDENT ')' ','
                    { $$ = $1; push_pair(&$$, $3, L(@3), $5, L(@5)); }
  ;

stmts:
    %empty          { $$ = (List){0}; }
  | stmts stmt      { $$ = $1; push(&$$, $2); }
  ;

/* stmt: IDENT '=' expr | names '=' expr | 'return' expr { ',' expr }
 * names: IDENT ',' [ IDENT { ',' IDENT } [ ',' ] ]   (a, b = torch.chunk(x, 2, 1)) */
stmt:
    IDENT '=' expr  { $$ = util_alloc(sizeof *$$); $$->kind = S_ASSIGN; $$->loc = L(@1); $$->name = $1; $$->val = $3; }
  | names '=' expr  { $$ = util_alloc(sizeof *$$); $$->kind = S_ASSIGN; $$->loc = L(@1);
                      $$->nnames = $1.n; $$->names = util_alloc(sizeof *$$->names * (size_t)$1.n);
                      $$->name_locs = util_alloc(sizeof *$$->name_locs * (size_t)$1.n);
                      $$->outer = util_alloc(sizeof *$$->outer * (size_t)$1.n);
                      int outer = -1;
                      for (int k = 0; k < $1.n; k++) {
                          const Expr *v = $1.v[k];
                          $$->names[k] = v->s;
                          $$->name_locs[k] = v->loc;
                          outer += v->i != 2;
                          $$->outer[k] = outer;
                          $$->nested |= v->i != 0;
                      }
                      $$->val = $3; }
  | IDENT AUGEQ expr
                    { /* x += r is x = x + r: our values are never updated in place */
                      Expr *x = mk(E_NAME, L(@1)); x->s = pyname($1); x->written = $1;
                      Expr *v = mk($2 == '+' ? E_ADD : $2 == '-' ? E_SUB : $2 == '*' ? E_MUL : E_DIV, L(@2));
                      v->a = x; v->b = $3; nest(P, v);
                      $$ = util_alloc(sizeof *$$); $$->kind = S_ASSIGN; $$->loc = L(@1); $$->name = $1; $$->val = v; }
  | RETURN expr     { $$ = util_alloc(sizeof *$$); $$->kind = S_RETURN; $$->loc = L(@1); $$->val = $2; }
  | RETURN expr ',' exprs
                    { /* return a, b: the tuple (a, b) */
                      Expr *t = mk(E_TUPLE, $2->loc); List l = {0}; push(&l, mkarg(NULL, $2->loc, $2));
                      for (int k = 0; k < $4.n; k++) push(&l, $4.v[k]);
                      t->args = (Arg **)l.v; t->nargs = l.n; nest(P, t);
                      $$ = util_alloc(sizeof *$$); $$->kind = S_RETURN; $$->loc = L(@1); $$->val = t; }
  | FOR IDENT IN expr '{' stmts '}'
                    { $$ = util_alloc(sizeof *$$); $$->kind = S_FOR; $$->loc = L(@1); $$->name = $2; $$->val = $4;
                      $$->body = (Stmt **)$6.v; $$->nbody = $6.n; }
  | FOR IDENT IN expr ':' stmt
                    { $$ = util_alloc(sizeof *$$); $$->kind = S_FOR; $$->loc = L(@1); $$->name = $2; $$->val = $4;
                      $$->body = util_alloc(sizeof *$$->body); $$->body[0] = $6; $$->nbody = 1; }
  ;

/* expr: cmpx [ 'if' cmpx 'else' expr ] (Python's conditional expression);
 * cmpx: orx [ CMP orx ]; orx: andx { '|' andx }; andx: arith { '&' arith };
 * arith: term { ('+' | '-') term }; term: unary { ('*' | '/' | '//' | '%' | '@') unary }
 * (Python's precedence: a comparison binds loosest, then '|', '&', '+';
 * unary minus and '~' bind tighter than '*'). */
expr:
    cmpx
  | cmpx IF cmpx ELSE expr
                    { $$ = mk(E_COND, L(@2)); $$->a = $1; $$->b = $3; $$->c = $5; nest(P, $$); }
  ;

cmpx:
    orx
  | orx CMP orx     { $$ = mk(E_CMP, L(@2)); $$->i = $2; $$->a = $1; $$->b = $3; nest(P, $$); }
  ;

orx:
    andx
  | orx '|' andx    { $$ = mk(E_OR, L(@2)); $$->a = $1; $$->b = $3; nest(P, $$); }
  ;

andx:
    arith
  | andx '&' arith  { $$ = mk(E_AND, L(@2)); $$->a = $1; $$->b = $3; nest(P, $$); }
  ;

arith:
    term
  | arith '+' term  { $$ = mk(E_ADD, L(@2)); $$->a = $1; $$->b = $3; nest(P, $$); }
  | arith '-' term  { $$ = mk(E_SUB, L(@2)); $$->a = $1; $$->b = $3; nest(P, $$); }
  ;

term:
    unary
  | term '*' unary  { $$ = mk(E_MUL, L(@2)); $$->a = $1; $$->b = $3; nest(P, $$); }
  | term '/' unary  { $$ = mk(E_DIV, L(@2)); $$->a = $1; $$->b = $3; nest(P, $$); }
  | term FDIV unary { $$ = mk(E_FDIV, L(@2)); $$->a = $1; $$->b = $3; nest(P, $$); }
  | term '%' unary  { $$ = mk(E_MOD, L(@2)); $$->a = $1; $$->b = $3; nest(P, $$); }
  | term '@' unary  { $$ = mk(E_MATMUL, L(@2)); $$->a = $1; $$->b = $3; nest(P, $$); }
  ;

/* unary: '-' unary | '~' unary | power; power: primary [ '**' unary ] (Python's: -x ** 2 is -(x ** 2)) */
unary:
    power
  | '-' unary       { $$ = mk(E_NEG, L(@1)); $$->a = $2; nest(P, $$); }
  | '~' unary       { $$ = mk(E_NOT, L(@1)); $$->a = $2; nest(P, $$); }
  ;

power:
    primary
  | primary POW unary { $$ = mk(E_POW, L(@2)); $$->a = $1; $$->b = $3; nest(P, $$); }
  ;

/* primary: INT | FLOAT | STRING | 'true' | 'false' | IDENT | IDENT '(' args ')'
 *        | '(' expr ')' | '(' expr ',' ')' | '(' expr ',' expr { ',' expr } ')'
 *        | '[' expr { ',' expr } [ ',' ] ']'
 *        | primary '.' IDENT '(' args ')'      (a method of any value: self.fc(x).view(...))
 *        | primary '[' subs ']'
 * (a one-element tuple as Python writes it: LayerNorm((64,)); a list is a
 * tuple: torch.cat([a, b], 1), LayerNorm([64])) */
primary:
    INT             { $$ = mk(E_INT, L(@1)); $$->i = $1; $$->f = (double)$1; }
  | FLOAT           { $$ = mk(E_FLOAT, L(@1)); $$->f = $1; }
  | STRING          { $$ = mk(E_STR, L(@1)); $$->s = $1; }
  | TRUE            { $$ = mk(E_BOOL, L(@1)); $$->i = 1; }
  | FALSE           { $$ = mk(E_BOOL, L(@1)); $$->i = 0; }
  | IDENT           { $$ = mk(E_NAME, L(@1)); $$->s = pyname($1); $$->written = $1; }
  | IDENT '(' args ')'
                    { $$ = nest(P, method(mk(E_CALL, L(@1)), $1, $3)); }
  | '(' expr ')'    { $$ = $2; }
  | '(' expr ',' ')' { $$ = mk(E_TUPLE, L(@1)); List l = {0}; push(&l, mkarg(NULL, $2->loc, $2));
                      $$->args = (Arg **)l.v; $$->nargs = l.n; nest(P, $$); }
  | '(' expr ',' exprs ')'
                    { $$ = mk(E_TUPLE, L(@1)); List l = {0}; push(&l, mkarg(NULL, $2->loc, $2));
                      for (int k = 0; k < $4.n; k++) push(&l, $4.v[k]);
                      $$->args = (Arg **)l.v; $$->nargs = l.n; nest(P, $$); }
  | '[' exprs ']'   { $$ = mk(E_TUPLE, L(@1)); $$->args = (Arg **)$2.v; $$->nargs = $2.n; nest(P, $$); }
  | '[' expr FOR IDENT IN expr ']'
                    { $$ = mk(E_COMP, L(@1)); $$->a = $2; $$->s = $4; $$->b = $6; nest(P, $$); }
  | '[' exprs ',' ']'
                    { $$ = mk(E_TUPLE, L(@1)); $$->args = (Arg **)$2.v; $$->nargs = $2.n; nest(P, $$); }
  | primary '.' IDENT '(' args ')'
                    { List l = {0}; push(&l, mkarg(NULL, $1->loc, $1));
                      for (int k = 0; k < $5.n; k++) push(&l, $5.v[k]);
                      $$ = mk(E_CALL, L(@3)); $$->s = $3; $$->written = util_fmt(".%s", $3);
                      $$->args = (Arg **)l.v; $$->nargs = l.n; nest(P, $$); }
  | primary '[' subs ']'
                    { $$ = mk(E_INDEX, L(@2)); $$->a = $1; $$->args = (Arg **)$3.v; $$->nargs = $3.n; nest(P, $$); }
  | primary '[' subs ',' ']'
                    { $$ = mk(E_INDEX, L(@2)); $$->a = $1; $$->args = (Arg **)$3.v; $$->nargs = $3.n; nest(P, $$); }
  ;

/* subs: sub { ',' sub }; sub: expr | [expr] ':' [expr] [':' [expr]] | '...'
 * (Python's subscripts: x[:, -1], x[..., :k], x[:, ::2], x[:, None]) */
subs:
    sub             { $$ = (List){0}; push(&$$, mkarg(NULL, $1->loc, $1)); }
  | subs ',' sub    { $$ = $1; push(&$$, mkarg(NULL, $3->loc, $3)); }
  ;

sub:
    expr
  | oexpr ':' oexpr { $$ = mk(E_SLICE, $1 ? $1->loc : L(@2)); $$->a = $1; $$->b = $3; nest(P, $$); }
  | oexpr ':' oexpr ':' oexpr
                    { $$ = mk(E_SLICE, $1 ? $1->loc : L(@2)); $$->a = $1; $$->b = $3; $$->c = $5; nest(P, $$); }
  | ELLIPSIS        { $$ = mk(E_ELLIPSIS, L(@1)); }
  ;

oexpr:
    %empty          { $$ = NULL; }
  | expr
  ;

exprs:
    expr            { $$ = (List){0}; push(&$$, mkarg(NULL, $1->loc, $1)); }
  | exprs ',' expr  { $$ = $1; push(&$$, mkarg(NULL, $3->loc, $3)); }
  ;

/* args: [ arg { ',' arg } [ ',' ] ]   (a trailing comma, as in Python) */
args:
    %empty          { $$ = (List){0}; }
  | arglist
  | arglist ','
  ;

arglist:
    arg             { $$ = (List){0}; push(&$$, $1); }
  | arglist ',' arg { $$ = $1; push(&$$, $3); }
  ;

/* arg: [ IDENT '=' ] expr */
arg:
    expr            { $$ = mkarg(NULL, $1->loc, $1); }
  | IDENT '=' expr  { $$ = mkarg($1, L(@1), $3); }
  ;

/* train: 'train' '{' { (IDENT | 'model') expr [ '{' { stmt } '}' ] } '}'
 * (a key with a body: the loss block, loss(out, y) { ... }) */
train:
    TRAIN '{' titems '}'
                    { $$ = util_alloc(sizeof *$$); $$->loc = L(@1); $$->items = (TrainItem **)$3.v;
                      $$->nitems = $3.n; }
  ;

titems:
    %empty          { $$ = (List){0}; }
  | titems titem    { $$ = $1; push(&$$, $2); }
  ;

titem:
    IDENT expr      { $$ = util_alloc(sizeof *$$); $$->loc = L(@1); $$->key = $1; $$->val = $2; }
  | IDENT expr '{' stmts '}'
                    { $$ = util_alloc(sizeof *$$); $$->loc = L(@1); $$->key = $1; $$->val = $2;
                      $$->body = (Stmt **)$4.v; $$->nbody = $4.n; $$->has_body = 1; $$->end = L(@5); }
  | MODEL expr      { $$ = util_alloc(sizeof *$$); $$->loc = L(@1); $$->key = "model"; $$->val = $2; }
  ;

%%

/* Bison names tokens by their aliases; string aliases may come quoted. */
static const char *tok_name(yysymbol_kind_t k, char *buf, size_t n)
{
    const char *s = yysymbol_name(k);
    size_t len = strlen(s);
    if (len >= 2 && s[0] == '"' && s[len - 1] == '"') {
        snprintf(buf, n, "%.*s", (int)(len - 2), s + 1);
        return buf;
    }
    return s;
}

/* Whether k can start an expression; such tokens are listed as one. */
static int starts_expr(yysymbol_kind_t k)
{
    const char *s = yysymbol_name(k);
    return k == YYSYMBOL_IDENT || k == YYSYMBOL_INT || k == YYSYMBOL_FLOAT || k == YYSYMBOL_STRING
        || k == YYSYMBOL_TRUE || k == YYSYMBOL_FALSE || !strcmp(s, "'('") || !strcmp(s, "'['") || !strcmp(s, "'-'")
        || !strcmp(s, "'~'");
}

/* Whether k is a binary operator (+ - * / // % @ & | and comparisons, a conditional's 'if') or continues a value (.
 * and [, a method or a subscript): listed as one, "an operator" */
static int is_operator(yysymbol_kind_t k)
{
    const char *s = yysymbol_name(k);
    return k == YYSYMBOL_FDIV || k == YYSYMBOL_POW || k == YYSYMBOL_CMP || k == YYSYMBOL_IF || !strcmp(s, "'+'") || !strcmp(s, "'-'") || !strcmp(s, "'*'") || !strcmp(s, "'/'")
        || !strcmp(s, "'@'") || !strcmp(s, "'.'") || !strcmp(s, "'['") || !strcmp(s, "'%'") || !strcmp(s, "'&'")
        || !strcmp(s, "'|'");
}

/* `unexpected '}', expected identifier or 'return'`: the offending token,
 * with its text where that helps, and the tokens that would have fit when
 * there are few enough to be a useful hint. Where any expression fits,
 * "expression" stands for the ten tokens that can start one. */
static int yyreport_syntax_error(const yypcontext_t *ctx, yyscan_t scanner, ParseState *P)
{
    (void)scanner;
    char msg[512], b[64];
    size_t k = 0;
    yysymbol_kind_t tok = yypcontext_token(ctx);
    const char *what = tok_name(tok, b, sizeof b);
    if (tok == YYSYMBOL_IDENT || tok == YYSYMBOL_INT || tok == YYSYMBOL_FLOAT)
        k += (size_t)snprintf(msg, sizeof msg, "unexpected %s '%.40s'", what, P->last_text);
    else
        k += (size_t)snprintf(msg, sizeof msg, "unexpected %s", what);

    yysymbol_kind_t exp[YYNTOKENS];
    int n = yypcontext_expected_tokens(ctx, exp, YYNTOKENS), expr = 0, m = 0;
    for (int i = 0; i < n; i++)     /* FLOAT and STRING fit only where any expression does */
        expr |= exp[i] == YYSYMBOL_FLOAT || exp[i] == YYSYMBOL_STRING;
    const char *names[YYNTOKENS + 1];
    if (expr)
        names[m++] = "expression";
    /* The operators are listed as one, last. */
    int op = 0;
    for (int i = 0; i < n; i++)
        if (is_operator(exp[i]))
            op |= !(expr && starts_expr(exp[i]));   /* unary '-' is the expression's */
        else if (!expr || !starts_expr(exp[i]))
            names[m++] = util_strdup(tok_name(exp[i], b, sizeof b));
    if (op)
        names[m++] = "an operator";
    enum { MAXEXP = 5 };
    for (int i = 0; m <= MAXEXP && i < m && k < sizeof msg; i++)
        k += (size_t)snprintf(msg + k, sizeof msg - k, "%s%s", i == 0 ? ", expected " : i == m - 1 ? " or " : ", ",
                              names[i]);
    diag_error(L(*yypcontext_location(ctx)), "%s", msg);
    return 0;
}

static void yyerror(YYLTYPE *lloc, yyscan_t scanner, ParseState *P, const char *msg)
{
    (void)scanner;
    if (strcmp(msg, "memory exhausted") == 0)
        msg = "nesting too deep";
    diag_error(L(*lloc), "%s", msg);
}

File *parse_file(const char *path, const char *text)
{
    ParseState st = {.file = path, .col = 1};
    void *sc = lex_open(&st, text);
    int bad = yyparse(sc, &st);
    lex_close(sc);
    return bad ? NULL : st.ast;
}
