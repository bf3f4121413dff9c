/* dtype.h - the safetensors element types and their widths. */
#ifndef DCR_CORE_DTYPE_H
#define DCR_CORE_DTYPE_H

enum dcr_dtype {
	DCR_DT_BOOL, DCR_DT_U8, DCR_DT_I8, DCR_DT_F8_E5M2, DCR_DT_F8_E4M3,
	DCR_DT_F8_E8M0, DCR_DT_F8_E4M3FNUZ, DCR_DT_F8_E5M2FNUZ, DCR_DT_I16,
	DCR_DT_U16, DCR_DT_F16, DCR_DT_BF16, DCR_DT_I32, DCR_DT_U32, DCR_DT_F32,
	DCR_DT_I64, DCR_DT_U64, DCR_DT_F64, DCR_DT_C64, DCR_DT_F4,
	DCR_DT_F6_E2M3, DCR_DT_F6_E3M2,
	DCR_DT_COUNT
};

const char *dcr_dtype_name(int dt);
int dcr_dtype_parse(const char *s); /* -1 if unknown */
unsigned dcr_dtype_bits(int dt);    /* bits per element */
/* Bytes per diff unit: the dtype's size, or 1 for sub-byte dtypes
 * (F4, F6_*), which are compared and changed byte by byte. */
unsigned dcr_dtype_unit(int dt);

#endif
