/* Step 4 of krunbox-reset: a new root as boot builds it, pivoted into, the old one detached. */
#ifndef KRUNBOX_RESET_ROOT_H
#define KRUNBOX_RESET_ROOT_H

/** Builds the new root over the image `lower` (an fd opened on the host), upper layer capped at upper_mb MiB, and
 * pivots into it; fails the reset otherwise. */
void reset_root(int lower, long upper_mb);

#endif
