// Nothing to import: the driver below only provides the entry point SwiftPM expects.
#pragma once
