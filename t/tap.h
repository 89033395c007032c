/* tap.h — a small TAP producer for the C tests (plan, ok, is, diag, skip_all, done_testing). */
#ifndef TG_TAP_H
#define TG_TAP_H

#define NO_PLAN (-1)

void plan(int n);
/* Prints "1..0 # SKIP why" and exits 0. */
_Noreturn void skip_all(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Returns cond; prints "ok N - what" or "not ok N - what". */
int ok(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* ok(|got - want| <= tol), printing both on failure. */
int is_near(double got, double want, double tol, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
int is_int(long long got, long long want, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* ok(strstr(got, want)), printing both on failure. */
int like(const char *got, const char *want, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
_Noreturn void bail_out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints the plan if NO_PLAN; returns the exit status (0 when all passed). */
int done_testing(void);

#endif
