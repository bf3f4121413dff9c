/* layout-cmd.h - the layout modes of dcr-diff and dcr-apply (layout-cmd.c). */
#ifndef DCR_LAYOUT_CMD_H
#define DCR_LAYOUT_CMD_H

/* 1 if an option in opts (NULL-terminated, e.g. "--layout") is on the
 * command line before any "--". */
int cmd_layout_wanted(int argc, char **argv, const char *const *opts);
int cmd_layout_diff(int argc, char **argv);
int cmd_layout_apply(int argc, char **argv);

#endif
