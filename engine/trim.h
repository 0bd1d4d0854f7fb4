/* Memory back from idle connections: every FS_TRIM_PERIOD_MS the agent asks
 * each fabric connection whose sender wrote nothing for a whole period to
 * give back its tx ring's free space (fabric op trim; shm frees the pages
 * for both processes).  Each end trims its own tx ring, so an idle
 * connection keeps a page or two per ring, whatever it carried before. */
#ifndef FS_ENGINE_TRIM_H
#define FS_ENGINE_TRIM_H

#include <stdint.h>

#define FS_TRIM_PERIOD_MS 1000

/* A channel was put on a connection (+1) or released (-1): the agent
 * looks only while this process has one. */
void fs_trim_count(int delta);
/* How many channels this process holds. */
uint32_t fs_trim_chans(void);

/* Agent: one pass over the connections; bytes given back. */
uint64_t fs_trim_idle(void);

#endif
