/* status.h - error reporting: a status code plus a thread-local message. */
#ifndef PI_STATUS_H
#define PI_STATUS_H
#include "powerinfer.h"

/* Record a message for pi_last_error() on this thread and return `status`, so failing paths
 * read `return pi_set_error(PI_ERR_FORMAT, "...", ...);`. */
int pi_set_error(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void pi_clear_error(void);

#endif
