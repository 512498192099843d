/* mbgen's FMI 2.0 unit: co-simulation and model exchange around an exported mechanism
 * library (mbgen export --fmu). The same file for every mechanism: what is specific to
 * one (its sizes, value references, independent coordinates, inputs, defaults, the
 * library's names) is data in fmu_model.h, written by mbgen from templates/fmu_model.h.j2.
 *
 * Co-simulation: fmi2DoStep runs the library's fixed-step integrator (an mb_stepper made
 * when initialization ends, with the integrator, formulation and projection chosen at
 * export, kept from step to step so that the unit takes mb_simulate's steps of one run)
 * in steps of the parameter mbgen.step, the inputs held over the communication step.
 * Model exchange: the continuous
 * states are the independent coordinates z and their rates; every other coordinate follows
 * from the position and velocity problems, kept on the branch the unit was assembled on.
 * A step or an evaluation that fails returns fmi2Error with a log message naming the
 * status, and leaves the last good state (never a NaN output). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "fmi2Functions.h"
#include "fmu_model.h"

#define FMU_SIZE(k) ((k) > 0 ? (k) : 1)
#if defined(__GNUC__)
#define FMU_PRINTF __attribute__((format(printf, 2, 3)))
#else
#define FMU_PRINTF
#endif

typedef enum { INSTANTIATED, INITIALIZATION, RUNNING, TERMINATED, FAILED } fmu_mode;

typedef struct {
    fmi2CallbackFunctions cb;
    char name[128];
    fmi2Type type;
    fmi2Boolean logging;
    fmu_mode mode;
    double t;
    double step;                 /* the integrator's internal step (mbgen.step) */
    double p[FMU_SIZE(FMU_NP)];
    double q[FMU_N], qd[FMU_N], qdd[FMU_N];
    double u[FMU_SIZE(FMU_NU)];  /* the inputs: generalized forces on fmu_inputs[] */
    double Q[FMU_N];             /* the inputs scattered over q */
    double sensors[FMU_SIZE(FMU_NS)], accelerometers[FMU_SIZE(FMU_NACC)];
    double phi[FMU_SIZE(FMU_M)], phi_norm, energy;
    double x[2 * FMU_D];         /* model exchange: z, ż */
    double zdd[FMU_SIZE(FMU_D)];
    int stale;                   /* model exchange: x or u changed since the last update */
    int outputs_stale;           /* sensors, ‖Φ‖, energy: not evaluated at q, q̇, q̈ yet */
    mb_options options;
    mb_plan* plan;
    mb_workspace* workspace;     /* model exchange's dynamics */
    mb_stepper* stepper;         /* co-simulation's integrator, from initialization on */
    long capacity;               /* steps the buffers below hold */
    double *table, *out_q, *out_qd, *out_qdd;
} fmu;

static void say(fmu* c, fmi2Status status, const char* format, va_list args)
{
    char message[512];
    if (!c->cb.logger || (status == fmi2OK && !c->logging)) return;
    vsnprintf(message, sizeof message, format, args);
    c->cb.logger(c->cb.componentEnvironment, c->name, status,
                 status == fmi2OK ? "logAll" : "logStatusError", "%s", message);
}

/* A failure of the unit's model (a step, an assembly): logged, and the unit is done. */
static FMU_PRINTF fmi2Status fail(fmu* c, const char* format, ...);
static fmi2Status fail(fmu* c, const char* format, ...)
{
    va_list args;
    va_start(args, format);
    say(c, fmi2Error, format, args);
    va_end(args);
    c->mode = FAILED;
    return fmi2Error;
}

/* A call the unit cannot honour: logged, the unit's state unchanged. */
static FMU_PRINTF fmi2Status refuse(fmu* c, const char* format, ...);
static fmi2Status refuse(fmu* c, const char* format, ...)
{
    va_list args;
    va_start(args, format);
    say(c, fmi2Error, format, args);
    va_end(args);
    return fmi2Error;
}

static void set_defaults(fmu* c)
{
    for (int i = 0; i < FMU_NP; ++i) c->p[i] = fmu_default_parameters[i];
    for (int i = 0; i < FMU_N; ++i) {
        c->q[i] = fmu_q0[i];
        c->qd[i] = c->qdd[i] = c->Q[i] = 0.0;
    }
    for (int i = 0; i < FMU_NU; ++i) c->u[i] = 0.0;
    c->step = FMU_STEP;
    c->t = 0.0;
    c->stale = 1;
    c->outputs_stale = 1;
    mb_stepper_free(c->stepper);
    c->stepper = NULL;
}

static void scatter_inputs(fmu* c)
{
    for (int i = 0; i < FMU_N; ++i) c->Q[i] = 0.0;
    for (int k = 0; k < FMU_NU; ++k) c->Q[fmu_inputs[k]] += c->u[k];
}

/* The outputs that follow from q, q̇, q̈: sensors, accelerometers, ‖Φ‖₂, T + V; evaluated
 * when asked for (fmi2GetReal), not after every step. */
static void evaluate_outputs(fmu* c)
{
    const mb_model* model = mb_model_get();
    double e[2];
    if (!c->outputs_stale) return;
    c->outputs_stale = 0;
    if (FMU_NS) mb_eval(model, MB_K_SENSORS, 1, c->q, 0, c->qd, 0, c->p, 0, c->sensors);
    if (FMU_NACC)
        mb_eval(model, MB_K_ACCELEROMETERS, 1, c->q, 0, c->qdd, 0, c->p, 0, c->accelerometers);
    double sum = 0.0;
    if (FMU_M) {
        mb_eval(model, MB_K_PHI, 1, c->q, 0, NULL, 0, c->p, 0, c->phi);
        for (int i = 0; i < FMU_M; ++i) sum += c->phi[i] * c->phi[i];
    }
    c->phi_norm = sqrt(sum);
    mb_eval(model, MB_K_ENERGY, 1, c->q, 0, c->qd, 0, c->p, 0, e);
    c->energy = e[0] + e[1];
}

/* vr is one of the outputs evaluate_outputs makes */
static int is_derived_output(fmi2ValueReference vr)
{
    return ((long)vr >= FMU_VR_SENSORS && (long)vr < FMU_VR_SENSORS + FMU_NS) ||
           ((long)vr >= FMU_VR_ACCELEROMETERS && (long)vr < FMU_VR_ACCELEROMETERS + FMU_NACC) ||
           vr == FMU_VR_PHI_NORM || vr == FMU_VR_ENERGY;
}

/* q̈ at the current state and inputs (the co-simulation's start) */
static int accelerations(fmu* c)
{
    int status = MB_OK;
    scatter_inputs(c);
    mb_forward_dynamics(c->plan, &c->options, 1, c->q, 0, c->qd, 0, c->Q, 0, c->p, 0, c->qdd,
                        NULL, NULL, NULL, NULL, &status);
    return status;
}

/* The initial state: the start values of z and ż, the other coordinates from the file's
 * q0 by Newton (its assembly branch), the other rates from Φq q̇ = 0. */
static fmi2Status assemble(fmu* c)
{
    double q[FMU_N], qd[FMU_N];
    int status = MB_OK;
    for (int i = 0; i < FMU_N; ++i) { q[i] = fmu_q0[i]; qd[i] = 0.0; }
    for (int j = 0; j < FMU_D; ++j) {
        q[fmu_z[j]] = c->q[fmu_z[j]];
        qd[fmu_z[j]] = c->qd[fmu_z[j]];
    }
    if (!(c->step > 0.0) || !isfinite(c->step))
        return fail(c, "mbgen.step = %g s: the internal step must be positive and finite",
                    c->step);
    mb_solve_position(c->plan, &c->options, 1, q, c->p, 0, fmu_z, FMU_D, 0,
                      c->options.newton_tol, c->options.max_iter, &status);
    if (status)
        return fail(c, "the initial positions could not be assembled from the start values "
                    "(t = %g s): %s", c->t, mb_status_text(status));
    mb_solve_velocity(c->plan, &c->options, 1, q, 0, qd, c->p, 0, fmu_z, FMU_D, 0, &status);
    if (status)
        return fail(c, "the initial velocities could not be solved (t = %g s): %s", c->t,
                    mb_status_text(status));
    memcpy(c->q, q, sizeof q);
    memcpy(c->qd, qd, sizeof qd);
    if ((status = accelerations(c)))
        return fail(c, "the initial accelerations could not be solved (t = %g s): %s", c->t,
                    mb_status_text(status));
    for (int j = 0; j < FMU_D; ++j) {
        c->x[j] = c->q[fmu_z[j]];
        c->x[FMU_D + j] = c->qd[fmu_z[j]];
        c->zdd[j] = c->qdd[fmu_z[j]];
    }
    c->stale = 0;
    c->outputs_stale = 1;
    if (c->type != fmi2CoSimulation) return fmi2OK;
    status = mb_stepper_new(c->plan, &c->options, c->q, c->qd, c->p, fmu_z,
                            FMU_INDEPENDENT ? FMU_D : 0, FMU_INTEGRATOR, FMU_INDEPENDENT,
                            FMU_PROJECT, &c->stepper);
    if (status)
        return fail(c, "the integrator could not be made: %s", status == MB_NO_MEMORY
                    ? "out of memory" : mb_status_text(status));
    return fmi2OK;
}

static int reserve(fmu* c, long steps)
{
    if (steps <= c->capacity) return 1;
    c->cb.freeMemory(c->table);
    c->cb.freeMemory(c->out_q);
    c->table = (double*)c->cb.allocateMemory((size_t)(2 * steps + 1) * FMU_N, sizeof(double));
    c->out_q = (double*)c->cb.allocateMemory((size_t)(3 * (steps + 1)) * FMU_N, sizeof(double));
    c->capacity = c->table && c->out_q ? steps : 0;
    c->out_qd = c->out_q ? c->out_q + (steps + 1) * FMU_N : NULL;
    c->out_qdd = c->out_qd ? c->out_qd + (steps + 1) * FMU_N : NULL;
    return c->capacity > 0;
}

/* `steps` steps of dt from the current state (the stepper's), inputs held; the state
 * moves only when every step succeeds. */
static int advance(fmu* c, double dt, long steps, long* failed)
{
    const size_t row = sizeof(double) * FMU_N;
    if (!reserve(c, steps)) return MB_NO_MEMORY;
    for (long k = 0; k < 2 * steps + 1; ++k) memcpy(c->table + k * FMU_N, c->Q, row);
    int status = mb_stepper_run(c->stepper, dt, steps, c->table, c->out_q, c->out_qd,
                                c->out_qdd, failed);
    if (status) return status;
    memcpy(c->q, c->out_q + steps * FMU_N, row);
    memcpy(c->qd, c->out_qd + steps * FMU_N, row);
    memcpy(c->qdd, c->out_qdd + steps * FMU_N, row);
    return MB_OK;
}

/* Model exchange: q, q̇ from z, ż (Newton from the last q), then z̈ and q̈. */
static fmi2Status update(fmu* c)
{
    double q[FMU_N], qd[FMU_N];
    int status = MB_OK;
    if (!c->stale) return fmi2OK;
    memcpy(q, c->q, sizeof q);
    memcpy(qd, c->qd, sizeof qd);
    for (int j = 0; j < FMU_D; ++j) {
        q[fmu_z[j]] = c->x[j];
        qd[fmu_z[j]] = c->x[FMU_D + j];
    }
    mb_solve_position(c->plan, &c->options, 1, q, c->p, 0, fmu_z, FMU_D, 0,
                      c->options.newton_tol, c->options.max_iter, &status);
    if (status)
        return fail(c, "t = %g s: the positions for the independent coordinates could not be "
                    "solved: %s", c->t, mb_status_text(status));
    mb_solve_velocity(c->plan, &c->options, 1, q, 0, qd, c->p, 0, fmu_z, FMU_D, 0, &status);
    if (status)
        return fail(c, "t = %g s: the velocities could not be solved: %s", c->t,
                    mb_status_text(status));
    scatter_inputs(c);
    double zdd[FMU_SIZE(FMU_D)], qdd[FMU_N];
    mb_independent_dynamics_in(c->workspace, 1, q, 0, qd, 0, c->Q, 0, c->p, 0, fmu_z, FMU_D,
                               zdd, NULL, NULL, NULL, &status);
    if (!status)
        mb_solve_acceleration(c->plan, &c->options, 1, q, 0, qd, 0, zdd, 0, c->p, 0, fmu_z,
                              FMU_D, qdd, &status);
    if (status)
        return fail(c, "t = %g s: the accelerations could not be solved: %s", c->t,
                    mb_status_text(status));
    memcpy(c->q, q, sizeof q);
    memcpy(c->qd, qd, sizeof qd);
    memcpy(c->qdd, qdd, sizeof qdd);
    memcpy(c->zdd, zdd, sizeof(double) * FMU_D);
    c->stale = 0;
    c->outputs_stale = 1;
    return fmi2OK;
}

/* vr is one of the count references from start */
static int in_block(fmi2ValueReference vr, long start, long count)
{
    return (long)vr >= start && (long)vr < start + count;
}

/* The variable of a value reference (NULL: none). */
static double* variable(fmu* c, fmi2ValueReference vr)
{
    if (in_block(vr, FMU_VR_Q, FMU_N)) return c->q + (vr - FMU_VR_Q);
    if (in_block(vr, FMU_VR_QD, FMU_N)) return c->qd + (vr - FMU_VR_QD);
    if (in_block(vr, FMU_VR_QDD, FMU_N)) return c->qdd + (vr - FMU_VR_QDD);
    if (in_block(vr, FMU_VR_SENSORS, FMU_NS))
        return c->sensors + (vr - FMU_VR_SENSORS);
    if (in_block(vr, FMU_VR_ACCELEROMETERS, FMU_NACC))
        return c->accelerometers + (vr - FMU_VR_ACCELEROMETERS);
    if (vr == FMU_VR_PHI_NORM) return &c->phi_norm;
    if (vr == FMU_VR_ENERGY) return &c->energy;
    if (in_block(vr, FMU_VR_INPUTS, FMU_NU)) return c->u + (vr - FMU_VR_INPUTS);
    if (in_block(vr, FMU_VR_PARAMETERS, FMU_NP))
        return c->p + (vr - FMU_VR_PARAMETERS);
    if (vr == FMU_VR_STEP) return &c->step;
    return NULL;
}

static int is_start_value(fmi2ValueReference vr)
{
    for (int j = 0; j < FMU_D; ++j)
        if (vr == (fmi2ValueReference)(FMU_VR_Q + fmu_z[j]) ||
            vr == (fmi2ValueReference)(FMU_VR_QD + fmu_z[j]))
            return 1;
    return 0;
}

/* ---- common functions ------------------------------------------------------ */

const char* fmi2GetTypesPlatform(void) { return fmi2TypesPlatform; }
const char* fmi2GetVersion(void) { return fmi2Version; }

fmi2Status fmi2SetDebugLogging(fmi2Component component, fmi2Boolean loggingOn,
                               size_t nCategories, const fmi2String categories[])
{
    (void)nCategories;
    (void)categories;
    ((fmu*)component)->logging = loggingOn;
    return fmi2OK;
}

fmi2Component fmi2Instantiate(fmi2String instanceName, fmi2Type fmuType, fmi2String fmuGUID,
                              fmi2String fmuResourceLocation,
                              const fmi2CallbackFunctions* functions, fmi2Boolean visible,
                              fmi2Boolean loggingOn)
{
    (void)fmuResourceLocation;
    (void)visible;
    if (!functions || !functions->allocateMemory || !functions->freeMemory) return NULL;
    if (!fmuGUID || strcmp(fmuGUID, FMU_GUID) != 0) {
        if (functions->logger)
            functions->logger(functions->componentEnvironment, instanceName, fmi2Error,
                              "logStatusError", "the GUID %s is not this unit's (%s)",
                              fmuGUID ? fmuGUID : "(none)", FMU_GUID);
        return NULL;
    }
    fmu* c = (fmu*)functions->allocateMemory(1, sizeof(fmu));
    if (!c) return NULL;
    memset(c, 0, sizeof *c);
    c->cb = *functions;
    snprintf(c->name, sizeof c->name, "%s", instanceName ? instanceName : "mbgen");
    c->type = fmuType;
    c->logging = loggingOn;
    const mb_model* model = mb_model_get();
    mb_model_options(model, &c->options);
    c->plan = mb_plan_new(model, fmu_active_rows, FMU_NR);
    c->workspace = c->plan ? mb_workspace_new(c->plan, &c->options, 1) : NULL;
    if (!c->plan || !c->workspace) {
        refuse(c, "out of memory");
        mb_workspace_free(c->workspace);
        mb_plan_free(c->plan);
        functions->freeMemory(c);
        return NULL;
    }
    set_defaults(c);
    c->mode = INSTANTIATED;
    return c;
}

void fmi2FreeInstance(fmi2Component component)
{
    fmu* c = (fmu*)component;
    if (!c) return;
    mb_stepper_free(c->stepper);
    mb_workspace_free(c->workspace);
    mb_plan_free(c->plan);
    c->cb.freeMemory(c->table);
    c->cb.freeMemory(c->out_q);
    c->cb.freeMemory(c);
}

fmi2Status fmi2SetupExperiment(fmi2Component component, fmi2Boolean toleranceDefined,
                               fmi2Real tolerance, fmi2Real startTime,
                               fmi2Boolean stopTimeDefined, fmi2Real stopTime)
{
    (void)toleranceDefined;
    (void)tolerance;
    (void)stopTimeDefined;
    (void)stopTime;
    fmu* c = (fmu*)component;
    if (c->mode != INSTANTIATED) return refuse(c, "fmi2SetupExperiment: not instantiated");
    c->t = startTime;
    return fmi2OK;
}

fmi2Status fmi2EnterInitializationMode(fmi2Component component)
{
    fmu* c = (fmu*)component;
    if (c->mode != INSTANTIATED) return refuse(c, "fmi2EnterInitializationMode: not instantiated");
    c->mode = INITIALIZATION;
    return fmi2OK;
}

fmi2Status fmi2ExitInitializationMode(fmi2Component component)
{
    fmu* c = (fmu*)component;
    if (c->mode != INITIALIZATION) return refuse(c, "fmi2ExitInitializationMode: not initializing");
    fmi2Status status = assemble(c);
    if (status == fmi2OK) c->mode = RUNNING;
    return status;
}

fmi2Status fmi2Terminate(fmi2Component component)
{
    ((fmu*)component)->mode = TERMINATED;
    return fmi2OK;
}

fmi2Status fmi2Reset(fmi2Component component)
{
    fmu* c = (fmu*)component;
    set_defaults(c);
    c->mode = INSTANTIATED;
    return fmi2OK;
}

fmi2Status fmi2GetReal(fmi2Component component, const fmi2ValueReference vr[], size_t nvr,
                       fmi2Real value[])
{
    fmu* c = (fmu*)component;
    if (c->type == fmi2ModelExchange && c->mode == RUNNING && c->stale && update(c) != fmi2OK)
        return fmi2Error;
    for (size_t k = 0; k < nvr; ++k) {
        const double* v = variable(c, vr[k]);
        if (!v) return refuse(c, "fmi2GetReal: a value reference this unit does not have");
        if (c->outputs_stale && is_derived_output(vr[k])) evaluate_outputs(c);
        value[k] = *v;
    }
    return fmi2OK;
}

fmi2Status fmi2SetReal(fmi2Component component, const fmi2ValueReference vr[], size_t nvr,
                       const fmi2Real value[])
{
    fmu* c = (fmu*)component;
    const int before = c->mode == INSTANTIATED || c->mode == INITIALIZATION;
    for (size_t k = 0; k < nvr; ++k) {
        const fmi2ValueReference r = vr[k];
        const int input = in_block(r, FMU_VR_INPUTS, FMU_NU);
        const int parameter = in_block(r, FMU_VR_PARAMETERS, FMU_NP) || r == FMU_VR_STEP;
        if (!input && !((parameter || is_start_value(r)) && before))
            return refuse(c, input || parameter || is_start_value(r)
                          ? "fmi2SetReal: parameters and start values are set before "
                            "initialization ends"
                          : "fmi2SetReal: a value reference that cannot be set");
        if (!isfinite(value[k])) return refuse(c, "fmi2SetReal: a value that is not finite");
    }
    for (size_t k = 0; k < nvr; ++k) *variable(c, vr[k]) = value[k];
    c->stale = 1;
    if (before) c->outputs_stale = 1;
    return fmi2OK;
}

static fmi2Status none_of_this_type(fmu* c, size_t nvr)
{
    return nvr ? refuse(c, "the unit has Real variables only") : fmi2OK;
}

fmi2Status fmi2GetInteger(fmi2Component c, const fmi2ValueReference vr[], size_t nvr,
                          fmi2Integer value[])
{
    (void)vr; (void)value;
    return none_of_this_type((fmu*)c, nvr);
}

fmi2Status fmi2GetBoolean(fmi2Component c, const fmi2ValueReference vr[], size_t nvr,
                          fmi2Boolean value[])
{
    (void)vr; (void)value;
    return none_of_this_type((fmu*)c, nvr);
}

fmi2Status fmi2GetString(fmi2Component c, const fmi2ValueReference vr[], size_t nvr,
                         fmi2String value[])
{
    (void)vr; (void)value;
    return none_of_this_type((fmu*)c, nvr);
}

fmi2Status fmi2SetInteger(fmi2Component c, const fmi2ValueReference vr[], size_t nvr,
                          const fmi2Integer value[])
{
    (void)vr; (void)value;
    return none_of_this_type((fmu*)c, nvr);
}

fmi2Status fmi2SetBoolean(fmi2Component c, const fmi2ValueReference vr[], size_t nvr,
                          const fmi2Boolean value[])
{
    (void)vr; (void)value;
    return none_of_this_type((fmu*)c, nvr);
}

fmi2Status fmi2SetString(fmi2Component c, const fmi2ValueReference vr[], size_t nvr,
                         const fmi2String value[])
{
    (void)vr; (void)value;
    return none_of_this_type((fmu*)c, nvr);
}

/* canGetAndSetFMUstate, canSerializeFMUstate, providesDirectionalDerivative: false */
fmi2Status fmi2GetFMUstate(fmi2Component c, fmi2FMUstate* state)
{
    (void)state;
    return refuse((fmu*)c, "fmi2GetFMUstate: not supported");
}

fmi2Status fmi2SetFMUstate(fmi2Component c, fmi2FMUstate state)
{
    (void)state;
    return refuse((fmu*)c, "fmi2SetFMUstate: not supported");
}

fmi2Status fmi2FreeFMUstate(fmi2Component c, fmi2FMUstate* state)
{
    (void)state;
    return refuse((fmu*)c, "fmi2FreeFMUstate: not supported");
}

fmi2Status fmi2SerializedFMUstateSize(fmi2Component c, fmi2FMUstate state, size_t* size)
{
    (void)state; (void)size;
    return refuse((fmu*)c, "fmi2SerializedFMUstateSize: not supported");
}

fmi2Status fmi2SerializeFMUstate(fmi2Component c, fmi2FMUstate state, fmi2Byte bytes[],
                                 size_t size)
{
    (void)state; (void)bytes; (void)size;
    return refuse((fmu*)c, "fmi2SerializeFMUstate: not supported");
}

fmi2Status fmi2DeSerializeFMUstate(fmi2Component c, const fmi2Byte bytes[], size_t size,
                                   fmi2FMUstate* state)
{
    (void)state; (void)bytes; (void)size;
    return refuse((fmu*)c, "fmi2DeSerializeFMUstate: not supported");
}

fmi2Status fmi2GetDirectionalDerivative(fmi2Component c, const fmi2ValueReference unknown[],
                                        size_t nUnknown, const fmi2ValueReference known[],
                                        size_t nKnown, const fmi2Real dvKnown[],
                                        fmi2Real dvUnknown[])
{
    (void)unknown; (void)nUnknown; (void)known; (void)nKnown; (void)dvKnown; (void)dvUnknown;
    return refuse((fmu*)c, "fmi2GetDirectionalDerivative: not supported");
}

/* ---- model exchange ---------------------------------------------------------- */

fmi2Status fmi2EnterEventMode(fmi2Component c)
{
    (void)c;
    return fmi2OK;
}

fmi2Status fmi2NewDiscreteStates(fmi2Component c, fmi2EventInfo* info)
{
    (void)c;
    info->newDiscreteStatesNeeded = fmi2False;
    info->terminateSimulation = fmi2False;
    info->nominalsOfContinuousStatesChanged = fmi2False;
    info->valuesOfContinuousStatesChanged = fmi2False;
    info->nextEventTimeDefined = fmi2False;
    info->nextEventTime = 0.0;
    return fmi2OK;
}

fmi2Status fmi2EnterContinuousTimeMode(fmi2Component c)
{
    (void)c;
    return fmi2OK;
}

fmi2Status fmi2CompletedIntegratorStep(fmi2Component c, fmi2Boolean noSetFMUStatePriorToCurrentPoint,
                                       fmi2Boolean* enterEventMode,
                                       fmi2Boolean* terminateSimulation)
{
    (void)c;
    (void)noSetFMUStatePriorToCurrentPoint;
    *enterEventMode = fmi2False;
    *terminateSimulation = fmi2False;
    return fmi2OK;
}

fmi2Status fmi2SetTime(fmi2Component c, fmi2Real time)
{
    ((fmu*)c)->t = time;
    return fmi2OK;
}

fmi2Status fmi2SetContinuousStates(fmi2Component component, const fmi2Real x[], size_t nx)
{
    fmu* c = (fmu*)component;
    if (nx != 2 * FMU_D) return refuse(c, "fmi2SetContinuousStates: not 2 x DOF states");
    for (size_t k = 0; k < nx; ++k)
        if (!isfinite(x[k])) return refuse(c, "fmi2SetContinuousStates: a state that is not finite");
    memcpy(c->x, x, sizeof(double) * nx);
    c->stale = 1;
    return fmi2OK;
}

fmi2Status fmi2GetDerivatives(fmi2Component component, fmi2Real derivatives[], size_t nx)
{
    fmu* c = (fmu*)component;
    if (nx != 2 * FMU_D) return refuse(c, "fmi2GetDerivatives: not 2 x DOF states");
    if (c->mode == RUNNING && update(c) != fmi2OK) return fmi2Error;
    for (int j = 0; j < FMU_D; ++j) {
        derivatives[j] = c->x[FMU_D + j];
        derivatives[FMU_D + j] = c->zdd[j];
    }
    return fmi2OK;
}

fmi2Status fmi2GetEventIndicators(fmi2Component c, fmi2Real indicators[], size_t ni)
{
    (void)indicators;
    return ni ? refuse((fmu*)c, "fmi2GetEventIndicators: the unit has none") : fmi2OK;
}

fmi2Status fmi2GetContinuousStates(fmi2Component component, fmi2Real x[], size_t nx)
{
    fmu* c = (fmu*)component;
    if (nx != 2 * FMU_D) return refuse(c, "fmi2GetContinuousStates: not 2 x DOF states");
    memcpy(x, c->x, sizeof(double) * nx);
    return fmi2OK;
}

fmi2Status fmi2GetNominalsOfContinuousStates(fmi2Component c, fmi2Real nominal[], size_t nx)
{
    (void)c;
    for (size_t k = 0; k < nx; ++k) nominal[k] = 1.0;
    return fmi2OK;
}

/* ---- co-simulation ------------------------------------------------------------ */

fmi2Status fmi2SetRealInputDerivatives(fmi2Component c, const fmi2ValueReference vr[],
                                       size_t nvr, const fmi2Integer order[],
                                       const fmi2Real value[])
{
    (void)vr; (void)nvr; (void)order; (void)value;
    return refuse((fmu*)c, "fmi2SetRealInputDerivatives: inputs are held over a step");
}

fmi2Status fmi2GetRealOutputDerivatives(fmi2Component c, const fmi2ValueReference vr[],
                                        size_t nvr, const fmi2Integer order[],
                                        fmi2Real value[])
{
    (void)vr; (void)nvr; (void)order; (void)value;
    return refuse((fmu*)c, "fmi2GetRealOutputDerivatives: not supported");
}

fmi2Status fmi2DoStep(fmi2Component component, fmi2Real currentCommunicationPoint,
                      fmi2Real communicationStepSize, fmi2Boolean noSetFMUStatePriorToCurrentPoint)
{
    fmu* c = (fmu*)component;
    (void)noSetFMUStatePriorToCurrentPoint;
    if (c->mode != RUNNING) return refuse(c, "fmi2DoStep: not initialized, or a step failed");
    const double h = communicationStepSize, dt = c->step;
    if (!(h > 0.0) || !isfinite(h))
        return refuse(c, "fmi2DoStep: the communication step must be positive and finite");
    /* whole steps of dt, then what is left of h (none when h is a multiple of dt) */
    long steps = (long)floor(h / dt * (1.0 + 1e-12));
    double rest = h - steps * dt;
    if (fabs(rest) <= 1e-9 * dt) rest = 0.0;
    double q[FMU_N], qd[FMU_N];
    memcpy(q, c->q, sizeof q);
    memcpy(qd, c->qd, sizeof qd);
    scatter_inputs(c);
    long failed = -1;
    int status = steps > 0 ? advance(c, dt, steps, &failed) : MB_OK;
    double at = currentCommunicationPoint + (failed > 0 ? failed : 0) * dt;
    if (!status && rest > 0.0) {
        status = advance(c, rest, 1, &failed);
        at = currentCommunicationPoint + steps * dt;
    }
    if (status) {
        memcpy(c->q, q, sizeof q);  /* the last good state stays */
        memcpy(c->qd, qd, sizeof qd);
        return fail(c, "the step from t = %g s failed at t = %g s: %s",
                    currentCommunicationPoint, at, status == MB_NO_MEMORY ? "out of memory"
                    : mb_status_text(status));
    }
    c->t = currentCommunicationPoint + h;
    c->outputs_stale = 1;
    return fmi2OK;
}

fmi2Status fmi2CancelStep(fmi2Component c)
{
    return refuse((fmu*)c, "fmi2CancelStep: steps are not asynchronous");
}

fmi2Status fmi2GetStatus(fmi2Component c, const fmi2StatusKind s, fmi2Status* value)
{
    (void)s; (void)value;
    return refuse((fmu*)c, "fmi2GetStatus: steps are not asynchronous");
}

fmi2Status fmi2GetRealStatus(fmi2Component component, const fmi2StatusKind s, fmi2Real* value)
{
    fmu* c = (fmu*)component;
    if (s != fmi2LastSuccessfulTime) return refuse(c, "fmi2GetRealStatus: fmi2LastSuccessfulTime only");
    *value = c->t;
    return fmi2OK;
}

fmi2Status fmi2GetIntegerStatus(fmi2Component c, const fmi2StatusKind s, fmi2Integer* value)
{
    (void)s; (void)value;
    return refuse((fmu*)c, "fmi2GetIntegerStatus: none");
}

fmi2Status fmi2GetBooleanStatus(fmi2Component c, const fmi2StatusKind s, fmi2Boolean* value)
{
    (void)s; (void)value;
    return refuse((fmu*)c, "fmi2GetBooleanStatus: none");
}

fmi2Status fmi2GetStringStatus(fmi2Component c, const fmi2StatusKind s, fmi2String* value)
{
    (void)s; (void)value;
    return refuse((fmu*)c, "fmi2GetStringStatus: none");
}
