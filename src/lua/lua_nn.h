/* lua_nn.h — the nn bindings (lua_nn.c, lua_param.c, lua_module.c, lua_nn_new.c, lua_ops.c) for the rest of src/lua. */
#ifndef TG_LUA_NN_H
#define TG_LUA_NN_H

#include "lua/lua_bind.h"

struct tg_module;
struct tg_param;

/* Sets core.nn (module constructors, Parameter) and core.ops (tensor ops for
 * custom layers) on the table at the top of the stack (the core table).
 * lua_core.c calls it from tg_lua_open_core. */
void tgl_open_nn(lua_State *L);

/* Sets core.ops on the table at the top of the stack (lua_ops.c). */
void tgl_open_ops(lua_State *L);
/* Sets the FP8 ops (lua_fp8.c) on the table at the top of the stack. */
void tgl_fp8_funcs(lua_State *L);

/* The tg_module of a tegraph.Module userdata, or of a Lua module table (wrapped
 * once into a callback module; the wrapper replaces the table at idx so it
 * stays alive); raises otherwise. */
struct tg_module *tgl_module_check(lua_State *L, int idx);

#define TGL_MODULE "tegraph.Module"
#define TGL_PARAM "tegraph.Parameter"

/* Parameters and hooks (lua_param.c) */
struct tg_param *tgl_param_check(lua_State *L, int idx);
void tgl_param_push(lua_State *L, struct tg_param *p);
/* Adds the Lua function at fnidx as a wgrad hook of p; returns its id (tg_param_remove_hook). */
int tgl_hook_add(lua_State *L, struct tg_param *p, int fnidx);
/* Raises the error tgl_hook_add would for fn on p (fn already one of p's hooks, p's hooks running); else returns. */
void tgl_hook_can_add(lua_State *L, struct tg_param *p, int fnidx);
/* Pushes a new tensor handle on t's storage (nil for NULL). */
void tgl_push_tensor_ref(lua_State *L, const tg_tensor *t);
int tgl_nn_parameter(lua_State *L); /* tg.nn.Parameter */
int tgl_nn_is_parameter(lua_State *L); /* tg.nn.is_parameter */
void tgl_open_param(lua_State *L);

/* Modules (lua_module.c). User value 1: fields table (a Lua-table module's
 * own table); 2: values kept alive with the module (children, tied). */
struct tgl_module {
    struct tg_module *m;
};
struct tgl_module *tgl_module_box(lua_State *L, int idx);
/* Pushes an empty Module box (fields: a table index, or 0 for a new table). */
struct tg_module **tgl_module_newbox(lua_State *L, int fields);
/* Keeps the value at idx alive as long as the module at midx. */
void tgl_module_keep(lua_State *L, int midx, int idx);
int tgl_nn_module(lua_State *L); /* tg.nn.Module */
/* The microbatch protocol's arguments (modules and graphed callables):
 * forward(x, mb), backward(dy, mb), backward_dw(mb). tgl_mb_arg: an integer
 * >= 1, or 0 when omitted (the engine picks); a tensor there is an argument
 * error saying the tensor comes first. tgl_protocol_tensor: the tensor of
 * `call` (e.g. "forward(x, mb)"); a number there is an argument error saying
 * the microbatch comes last. */
int tgl_mb_arg(lua_State *L, int idx);
/* A list of 1 .. TG_MAX_IO tensors at idx into x (nil entries NULL); its length. */
int tgl_tensor_list(lua_State *L, int idx, const tg_tensor **x, const char *call);
/* Pushes y[0 .. n-1], taking them: the tensor when single and n is 1, else a list (nil holes). */
void tgl_push_tensors(lua_State *L, tg_tensor **y, int n, int single);
tg_tensor *tgl_protocol_tensor(lua_State *L, int idx, const char *call);
void tgl_open_module(lua_State *L);

/* FP8 recipes (lua_fp8_recipe.c): sets core.fp8 (recipes, autocast setting, scale update)
 * on the table at the top; reads a recipe table (raises naming `what`); the
 * module methods set_fp8 and fp8_state. */
void tgl_open_fp8(lua_State *L);
void tgl_fp8_recipe_check(lua_State *L, int idx, const char *what, tg_fp8_recipe *r);
int tgl_module_set_fp8(lua_State *L);
int tgl_module_fp8_state(lua_State *L);

/* Constructors (lua_nn_new.c): sets them into the table at the top. */
void tgl_nn_constructors(lua_State *L);

#endif
