/* dtype.c - the safetensors dtype table. */
#include "config.h"

#include <string.h>

#include "core/dtype.h"

static const struct {
	const char *name;
	unsigned bits;
} dtypes[DCR_DT_COUNT] = {
	[DCR_DT_BOOL] = {"BOOL", 8},
	[DCR_DT_U8] = {"U8", 8},
	[DCR_DT_I8] = {"I8", 8},
	[DCR_DT_F8_E5M2] = {"F8_E5M2", 8},
	[DCR_DT_F8_E4M3] = {"F8_E4M3", 8},
	[DCR_DT_F8_E8M0] = {"F8_E8M0", 8},
	[DCR_DT_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
	[DCR_DT_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
	[DCR_DT_I16] = {"I16", 16},
	[DCR_DT_U16] = {"U16", 16},
	[DCR_DT_F16] = {"F16", 16},
	[DCR_DT_BF16] = {"BF16", 16},
	[DCR_DT_I32] = {"I32", 32},
	[DCR_DT_U32] = {"U32", 32},
	[DCR_DT_F32] = {"F32", 32},
	[DCR_DT_I64] = {"I64", 64},
	[DCR_DT_U64] = {"U64", 64},
	[DCR_DT_F64] = {"F64", 64},
	[DCR_DT_C64] = {"C64", 64},
	[DCR_DT_F4] = {"F4", 4},
	[DCR_DT_F6_E2M3] = {"F6_E2M3", 6},
	[DCR_DT_F6_E3M2] = {"F6_E3M2", 6},
};

const char *dcr_dtype_name(int dt)
{
	return dt >= 0 && dt < DCR_DT_COUNT ? dtypes[dt].name : "?";
}

int dcr_dtype_parse(const char *s)
{
	for (int i = 0; i < DCR_DT_COUNT; i++)
		if (!strcmp(s, dtypes[i].name))
			return i;
	return -1;
}

unsigned dcr_dtype_bits(int dt)
{
	return dt >= 0 && dt < DCR_DT_COUNT ? dtypes[dt].bits : 0;
}

unsigned dcr_dtype_unit(int dt)
{
	unsigned b = dcr_dtype_bits(dt);
	return b >= 8 ? b / 8 : 1;
}
