"""Fixed sizes of the timeline's areas, in pixels (shared by painting and input)."""

LABEL_W = 230  # the row-label gutter on the left
AXIS_H = 24  # the time axis at the top
STEP_H = 24  # the step strip under the axis
LEGEND_H = 22  # the kind legend at the bottom
SCROLL_W = 14  # the vertical scroll bar on the right
PIN_W = 16  # the pin mark at the right end of a row label
MIN_SPAN_NS = 20  # the deepest zoom
LABEL_MIN_PX = 28  # narrower slices get no label
MAX_LABELS = 2500  # labels drawn per repaint at most
