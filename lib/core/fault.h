/* fault.h - fault points: how the crash suites kill a run at every durable
 * step (a write, rename or fsync that a crash could fall just after).
 *
 * The caller owns a struct dcr_fault and passes it down in the options of
 * every operation that takes durable steps; each step calls
 * dcr_fault_point(). Armed with N, the Nth point reached through that
 * struct kills the process with SIGKILL, as a power cut would. One struct
 * passed to several operations counts their steps as one sequence.
 * DCR_FAULT_AT=N arms it, read by dcr_fault_from_env() and nowhere else.
 */
#ifndef DCR_CORE_FAULT_H
#define DCR_CORE_FAULT_H

struct dcr_fault {
	unsigned long at; /* the point that kills (0: none) */
	unsigned long n;  /* points reached so far */
};

/* Arm f from $DCR_FAULT_AT (unset, empty or malformed: unarmed). */
void dcr_fault_from_env(struct dcr_fault *f);
/* One durable step; f may be NULL (no fault injection). */
void dcr_fault_point(struct dcr_fault *f);

#endif
