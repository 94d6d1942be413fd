"""Pure Plotly figure builders for scheduler pages (no Django): data in, figure out."""

from collections.abc import Iterable
from datetime import datetime

import plotly.graph_objects as go
from plotly.subplots import make_subplots


def gpu_usage_figure(rows: Iterable[tuple[str, datetime, float | None, float | None]]) -> go.Figure:
    """Two stacked panels, one line per GPU: utilization (%) and memory used (GiB).
    ``rows`` are (gpu label, time, util %, memory MiB); None values leave gaps."""
    series: dict[str, tuple[list, list, list]] = {}
    for label, at, util, mem in rows:
        xs, utils, mems = series.setdefault(label, ([], [], []))
        xs.append(at)
        utils.append(util)
        mems.append(None if mem is None else round(mem / 1024, 2))
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("Utilization (%)", "Memory used (GiB)"))
    for label, (xs, utils, mems) in sorted(series.items()):
        fig.add_trace(go.Scatter(x=xs, y=utils, name=label, mode="lines", legendgroup=label), row=1, col=1)
        fig.add_trace(go.Scatter(x=xs, y=mems, name=label, mode="lines", legendgroup=label, showlegend=False),
                      row=2, col=1)
    fig.update_yaxes(range=[0, 100], row=1, col=1)
    fig.update_layout(height=420, margin={"l": 50, "r": 20, "t": 40, "b": 30}, template="plotly_white",
                      legend={"orientation": "h"})
    return fig
