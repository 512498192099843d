/* The exported library's example program, the same for every mechanism: mbgen writes it
 * after the library's header and a #define per mb_ / MB_ name it uses, which gives the
 * names the library's prefix (MB_N is the mechanism's N, mb_q0 its q0, ...).
 *
 *   ./example          q̈ and its Jacobians at q0, at rest
 *   ./example FILE     the same for each state in FILE: 2n numbers each (n of q, then n
 *                      of q̇), separated by spaces or line breaks; FILE - reads stdin
 *
 * Each state prints four lines, "qdd ...", "Jq ...", "Jqd ...", "JQ ..." (the n × n
 * Jacobians ∂q̈/∂q, ∂q̈/∂q̇, ∂q̈/∂Q row by row). Exit codes: 0 done, 1 a file that cannot
 * be read or a state the dynamics cannot solve, 2 bad usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = MB_N };

static void usage(FILE* out, const char* program)
{
    fprintf(out, "usage: %s          q'' and its Jacobians at q0, at rest\n"
                 "       %s FILE     the same for each state in FILE: %d numbers each "
                 "(q, then q'); - reads stdin\n", program, program, 2 * N);
}

static void print_row(const char* label, const double* values, int count)
{
    printf("%s", label);
    for (int i = 0; i < count; ++i) printf(" %.17g", values[i]);
    printf("\n");
}

/* q̈ and its Jacobians at (q, q̇), printed; 0, or 1 (said on stderr) when it fails */
static int solve(const mb_plan* plan, const mb_options* options, const double* q,
                 const double* qd, const char* where)
{
    double qdd[N], Jq[N * N], Jqd[N * N], JQ[N * N];
    int status = 0;
    if (mb_forward_dynamics(plan, options, 1, q, 0, qd, 0, NULL, 0, mb_default_parameters, 0,
                            qdd, NULL, Jq, Jqd, JQ, &status)) {
        fprintf(stderr, "%s: %s\n", where, mb_status_text(status));
        return 1;
    }
    print_row("qdd", qdd, N);
    print_row("Jq", Jq, N * N);
    print_row("Jqd", Jqd, N * N);
    print_row("JQ", JQ, N * N);
    return 0;
}

/* each state of the file: 2n numbers; a partial state or a word is an error */
static int each_state(const mb_plan* plan, const mb_options* options, FILE* in,
                      const char* name)
{
    double state[2 * N];
    char where[64];
    for (long k = 1;; ++k) {
        int got = 0;
        while (got < 2 * N && fscanf(in, "%lf", &state[got]) == 1) ++got;
        if (got == 0 && feof(in)) {
            if (k > 1) return 0;
            fprintf(stderr, "%s: no state in it (%d numbers each)\n", name, 2 * N);
            return 1;
        }
        if (got < 2 * N) {
            fprintf(stderr, "%s: state %ld: %s after %d of its %d numbers (q, then q')\n",
                    name, k, feof(in) ? "the file ends" : "not a number", got, 2 * N);
            return 1;
        }
        snprintf(where, sizeof where, "state %ld", k);
        if (solve(plan, options, state, state + N, where)) return 1;
    }
}

int main(int argc, char** argv)
{
    const char* program = argc > 0 ? argv[0] : "example";
    if (argc > 2 || (argc == 2 && argv[1][0] == '-' && argv[1][1] != '\0')) {
        int help = argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"));
        usage(help ? stdout : stderr, program);
        return help ? 0 : 2;
    }
    mb_options options;
    mb_model_options(mb_model_get(), &options); /* tolerances for its size */
    mb_plan* plan = mb_plan_new(mb_model_get(), mb_active_rows, MB_ACTIVE_ROWS);
    if (!plan) {
        fprintf(stderr, "%s: out of memory\n", program);
        return 1;
    }
    int failed;
    if (argc == 1) {
        double q[N], qd[N];
        for (int i = 0; i < N; ++i) { q[i] = mb_q0[i]; qd[i] = 0.0; }
        failed = solve(plan, &options, q, qd, "q0");
    } else if (!strcmp(argv[1], "-")) {
        failed = each_state(plan, &options, stdin, "stdin");
    } else {
        FILE* in = fopen(argv[1], "r");
        if (!in) {
            perror(argv[1]);
            mb_plan_free(plan);
            return 1;
        }
        failed = each_state(plan, &options, in, argv[1]);
        fclose(in);
    }
    mb_plan_free(plan);
    return failed;
}
