/* pack-list.h - dcr-pack --list (cmd/pack-list.c). */
#ifndef DCR_CMD_PACK_LIST_H
#define DCR_CMD_PACK_LIST_H

/* List the pack or delta at path ("-": standard input, a tar stream or a
 * delta) as dcr-pack(1) describes; records end with eol (NUL with -z).
 * The exit status. */
int cmd_pack_list(const char *path, int porcelain, char eol);

#endif
