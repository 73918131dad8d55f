/* emit_attn.h: AttnGeo and attn_geometry moved to cddpc.h (section emit_attn.c) */
#include "cddpc.h"
