/* status.c - status texts and the thread-local last-error message. */
#include <stdarg.h>
#include <stdio.h>

#include "status.h"

static _Thread_local char last_error[512];

PI_API const char *pi_status_str(int status) {
    switch (status) {
    case PI_OK: return "ok";
    case PI_ERR_IO: return "I/O error";
    case PI_ERR_FORMAT: return "invalid or corrupt GGUF file";
    case PI_ERR_UNSUPPORTED: return "unsupported model or tensor type";
    case PI_ERR_NOMEM: return "out of memory";
    case PI_ERR_ARG: return "invalid argument";
    case PI_ERR_CONTEXT: return "context window exceeded";
    default: return "unknown error";
    }
}

PI_API const char *pi_last_error(void) { return last_error; }

void pi_clear_error(void) { last_error[0] = '\0'; }

int pi_set_error(int status, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, args);
    va_end(args);
    return status;
}
